"""The sandbox's child side: confine this process, then run the program. Standard library only.

Started by tools/sandbox/run.py as `python -I -S bootstrap.py CONFIG_JSON` in a new session,
with a scrubbed environment, stdin from /dev/null and the working directory prepared; normally
inside bubblewrap's namespaces (tools/sandbox/boundary.py: the kernel boundary, which is what
actually confines the program: a program can rewrite this process's memory, so nothing below
that lives in this process can be relied on alone). In order, before any program code runs:

  1. leave the network: only where no kernel boundary did it already, a new network namespace
     (unshare), or a user + network namespace when not root; the parent is told whether it worked;
  2. kernel limits (resource): CPU time, address space, open files, file size, no core files;
  3. import the allowed modules the program names (numpy, pandas too) while their own imports
     are free of the policy, and exercise what they load lazily (see `_WARM_UP`);
  4. process limit, then drop root to the unprivileged sandbox user (no writes to anything
     that user cannot write; RLIMIT_NPROC holds for it);
  5. the seccomp filter built by tools/sandbox/seccomp.py (no exec, no new process, nothing
     that reaches another process or leaves the namespaces); it cannot be removed afterwards;
  6. report what took effect, and a fresh random key, as the first line on the status pipe;
  7. the Python policy (defence in depth): an audit hook refusing processes, sockets, ctypes,
     frame and gc introspection, file access outside the working directory and the loading
     of any module not whitelisted; a restricted `__import__` for the program itself.
Then the program (program.py in the working directory) runs with `records`-style inputs
from _inputs.json as globals.

The policy is never relaxed once installed: no program code (a `__str__`, `__repr__`, note,
finalizer, exit handler) ever runs without it. The program can reach every loaded module
(whitelisted modules hold `sys`), so the hook and the import function refer only to values
bound before the program started, never to a module attribute, global or builtin it could
replace. When the program raises, the interpreter's own C display formats the traceback with
the policy on, and the status pipe gets one more line, `KEY <memory flag> <traceback>`; the
program cannot write that line because it cannot read KEY. The parent (run.py) keeps the
program's frames and takes the failure kind from that line, never from what was printed.
"""

import json
import os
import resource
import sys

CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000

# Audit events the program may never raise (prefix match). Opening files and loading modules
# are checked in detail instead.
_REFUSED_EVENTS = (
    "os.system", "os.exec", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.kill", "os.killpg",
    "os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.symlink", "os.link", "os.chmod", "os.chown",
    "os.chflags", "os.lchflags", "os.truncate", "os.utime", "os.listdir", "os.scandir", "os.chdir",
    "os.putenv", "os.unsetenv", "os.setxattr", "os.removexattr", "os.startfile", "os.add_dll_directory",
    "subprocess.", "socket.", "ctypes.", "_posixsubprocess", "pty.", "shutil.", "glob.", "resource.",
    "fcntl.", "mmap.", "sys._getframe", "sys._current_frames", "sys._current_exceptions", "sys.setprofile",
    "sys.settrace", "gc.", "object.__getattr__", "function.__new__", "code.__new__", "sys.addaudithook",
    "cpython.PyInterpreterState", "cpython.run_", "urllib.", "http.", "ftplib.", "smtplib.", "poplib.",
    "imaplib.", "nntplib.", "telnetlib.", "webbrowser.", "winreg.", "msvcrt.", "syslog.", "signal.",
    "sqlite3.", "marshal.load", "pickle.find_class", "builtins.input", "setopencodehook", "sys.monitoring",
    "sys._getframemodulename", "sys.remote_exec",
)
# Function attributes the program may not replace (object.__setattr__ events): the restricted import
# keeps its real importer in __defaults__ and its whitelist in __code__.
_FROZEN_ATTRIBUTES = frozenset({"__code__", "__defaults__", "__kwdefaults__"})
# What whitelisted modules load lazily, exercised while still root: the program runs as a user
# who cannot read the Python installation, so a module first needed then would not be found.
_WARM_UP = {
    "datetime": "import datetime\ndatetime.datetime.strptime('2021-03-04', '%Y-%m-%d')",
    "pandas": ("import pandas as pd\nd = pd.DataFrame({'a': ['x', 'y', 'x'], 'b': [1.5, 2.0, 3.0]})\n"
               "g = d.groupby('a')['b'].agg(['sum', 'mean'])\nstr(d); str(g); repr(g); d.to_csv(); g.to_string()\n"
               "d.to_dict('records'); d.describe(); pd.to_datetime(['2021-01-02']); d.sort_values('b')\n"
               "pd.Series([1, None]).fillna(0); d.merge(d, on='a'); d.pivot_table(index='a', values='b')\n"
               "pd.read_csv(__import__('io').StringIO('a,b\\n1,2\\n')); d.to_json()"),
    "numpy": "import numpy as np\na = np.arange(6.0).reshape(2, 3)\nstr(a); repr(a); a.mean(); np.percentile(a, 50)",
}
# Installed modules that read files in native code, past the audit hook: never loaded, so a
# whitelisted module that would use them falls back (pandas runs without pyarrow).
_NEVER_LOADED = ("pyarrow", "fsspec", "h5py", "tables", "fastparquet", "sqlalchemy")


def _leave_network() -> str:
    """A new, empty network namespace for this process; returns how, or why not."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) == 0:
        return "network namespace"
    if os.geteuid() != 0 and libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:
        return "user and network namespace"
    return "failed: " + os.strerror(ctypes.get_errno())


def _install_seccomp(program: bytes, calls: int) -> str:
    """Install the packed BPF filter (PR_SET_NO_NEW_PRIVS, then PR_SET_SECCOMP); returns what held, or why not."""
    import ctypes

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    libc = ctypes.CDLL(None, use_errno=True)
    instructions = ctypes.create_string_buffer(program, len(program))
    fprog = SockFprog(len(program) // 8, ctypes.addressof(instructions))
    pr_set_no_new_privs, pr_set_seccomp, seccomp_mode_filter = 38, 22, 2
    if libc.prctl(pr_set_no_new_privs, 1, 0, 0, 0) != 0:
        return "failed: no_new_privs: " + os.strerror(ctypes.get_errno())
    if libc.prctl(pr_set_seccomp, seccomp_mode_filter, ctypes.byref(fprog), 0, 0) != 0:
        return "failed: " + os.strerror(ctypes.get_errno())
    return f"filter installed ({calls} system calls refused)"


def _forget_ctypes() -> None:
    """Drop ctypes from sys.modules so the program does not find it loaded (the audit hook refuses it anyway).
    Modules like numpy keep their own reference: this is tidiness, not a boundary."""
    for name in [m for m in sys.modules if m == "ctypes" or m.startswith("ctypes.") or m == "_ctypes"]:
        del sys.modules[name]


def _limit(kind: int, soft: int, hard: int | None = None) -> int:
    """Set a kernel limit (never above the current hard limit); returns the soft value set."""
    _, current_hard = resource.getrlimit(kind)
    hard = soft if hard is None else hard
    if current_hard != resource.RLIM_INFINITY:
        hard = min(hard, current_hard)
        soft = min(soft, hard)
    resource.setrlimit(kind, (soft, hard))
    return soft


def _drop_privileges(uid: int, gid: int) -> str:
    if os.geteuid() != 0:
        return f"unchanged (uid {os.geteuid()}: not root, cannot switch user)"
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    try:
        os.setuid(0)
    except PermissionError:
        return f"uid {uid}"
    raise SystemExit("sandbox: could not drop root")  # pragma: no cover - the kernel refused setuid


def _make_hook(workdir: str, modules: frozenset, read_roots: tuple):
    """The audit hook for `workdir`, whitelist `modules` and readable `read_roots`.

    It refers only to the local names bound here (C functions, types, immutable values): the
    program can replace any module attribute, global or builtin, and the hook must not call one.
    It fails closed: an unexpected argument raises, which refuses the operation.
    """
    import posix

    lstat, readlink, getcwd = posix.lstat, posix.readlink, posix.getcwd
    str_type, bytes_type, int_type, type_of = str, bytes, int, type
    refusal, import_refusal, os_error = PermissionError, ImportError, OSError
    refused, frozen_attributes = _REFUSED_EVENTS, _FROZEN_ATTRIBUTES
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    workdir = workdir.rstrip("/")
    inside_workdir = workdir + "/"
    roots = tuple(r.rstrip("/") for r in read_roots)
    inside_roots = tuple(r + "/" for r in roots)

    def resolve(path):
        """The absolute path with symbolic links followed (os.path.realpath is Python code the program can patch)."""
        if not path.startswith("/"):
            path = getcwd() + "/" + path
        pending = path.split("/")[::-1]
        parts, hops = [], 0
        while pending:
            part = pending.pop()
            if part == "" or part == ".":
                continue
            if part == "..":
                parts = parts[:-1]
                continue
            candidate = "/" + "/".join(parts + [part])
            try:
                link = (lstat(candidate).st_mode & 0o170000) == 0o120000
            except os_error:
                link = False  # not there (or not ours to see): the name as written
            if not link:
                parts = parts + [part]
                continue
            hops += 1
            if hops > 40:
                raise refusal(f"sandbox: too many symbolic links in {path}")
            target = readlink(candidate)
            if target.startswith("/"):
                parts = []
            pending = pending + target.split("/")[::-1]
        return "/" + "/".join(parts)

    def hook(event, args):
        if event == "open":
            path, mode, flags = args
            if type_of(path) is int_type:
                return  # an already open descriptor
            if type_of(path) is bytes_type:
                path = path.decode("utf-8", "surrogateescape")
            elif type_of(path) is not str_type:  # a PathLike's __fspath__ could answer differently each call
                raise refusal("sandbox: open a file by its name (a str), not by a path object")
            real = resolve(path)
            writing = (type_of(mode) is str_type and ("w" in mode or "a" in mode or "x" in mode or "+" in mode)) or (
                type_of(flags) is int_type and (flags & write_flags) != 0)
            if real == workdir or real.startswith(inside_workdir):
                return
            # the interpreter's library files, read by lazy imports through io (os.open takes a dir_fd the
            # event does not show, so it gets the working directory only)
            if not writing and mode is not None and (real in roots or real.startswith(inside_roots)):
                return
            raise refusal(f"sandbox: {'writing' if writing else 'reading'} {real} is not allowed "
                          "(only files in the working directory)")
        if event == "import":
            name = args[0]
            if str_type.partition(name, ".")[0] not in modules:
                raise import_refusal(f"sandbox: loading module {str_type.__str__(name)!r} is not allowed")
            return
        if event == "object.__setattr__":
            if args[1] in frozen_attributes:
                raise refusal(f"sandbox: replacing a function's {args[1]} is not allowed")
            return
        if event.startswith(refused):
            raise refusal(f"sandbox: {event} is not allowed")

    return hook


def _restricted_import(modules: frozenset, real_import):
    """The program's `__import__`: whitelisted top-level modules only, without relative imports.

    It has no closure and empty globals; the whitelist is a constant of its code (reading
    `__code__` is refused) and the real importer a default (replacing `__defaults__` is refused).
    """
    allowed = ", ".join(sorted(modules))
    names = "{" + ", ".join(repr(m) for m in sorted(modules)) + "}" if modules else "()"
    source = ("def __import__(name, globals=None, locals=None, fromlist=(), level=0, _import=None, _refuse=None):\n"
              f"    if level == 0 and ''.__class__.partition(name, '.')[0] in {names}:\n"
              "        return _import(name, globals, locals, fromlist, level)\n"
              f"    raise _refuse('sandbox: module %r is not allowed (allowed: {allowed})' % (name,))\n")
    scope = {"__builtins__": {}}
    exec(compile(source, "<sandbox import>", "exec"), scope)
    function = scope.pop("__import__")
    function.__defaults__ = (None, None, (), 0, real_import, ImportError)
    return function


def _refuse_unaudited_calls() -> None:
    """Replace os.mknod and os.mkfifo (in posix and os) with a refusal: they raise no audit event,
    so the hook cannot see a program create an empty file or a FIFO wherever the sandbox user may
    (e.g. /tmp). The refusal is compiled apart, with no globals the program could reach."""
    import posix

    scope = {"__builtins__": {"PermissionError": PermissionError}}
    exec("def refuse(*args, **kwargs):\n"
         "    raise PermissionError('creating FIFOs and device nodes (os.mknod, os.mkfifo) is not allowed in the "
         "sandbox')\n", scope)
    for name in ("mknod", "mkfifo"):
        for module in (posix, os):
            if hasattr(module, name):
                setattr(module, name, scope["refuse"])


def _program_builtins(modules: frozenset, policy: bool) -> dict:
    import builtins

    table = dict(builtins.__dict__)
    if policy:
        table["__import__"] = _restricted_import(modules, builtins.__import__)
        for name in ("breakpoint", "input", "help", "exit", "quit", "copyright", "credits", "license"):
            table.pop(name, None)
    return table


def _preload(names: list[str], status: dict) -> None:
    """Import (and warm up) the modules the program may use, while their own imports are unrestricted."""
    for name in _NEVER_LOADED:
        sys.modules.setdefault(name, None)  # `import pyarrow` now raises ImportError
    for name in names:
        try:
            __import__(name)
            status["modules"].append(name)
        except ImportError:
            continue  # not installed here: a program importing it gets ImportError
        except MemoryError:
            status["modules_failed"] = status.get("modules_failed", []) + [name]
            continue
        if name in _WARM_UP:
            try:
                exec(_WARM_UP[name], {})
            except Exception as err:  # noqa: BLE001 - a warm-up failure only costs a lazy import later
                status.setdefault("warm_up_failed", {})[name] = f"{type(err).__name__}: {err}"[:200]


def main() -> None:
    config = json.loads(sys.argv[1])
    workdir = config["workdir"]
    limits = config["limits"]
    modules = frozenset(limits["modules"])
    policy = limits.get("python_policy", True)
    status = {"network": "not attempted", "user": "unchanged", "limits": {}, "modules": [], "python_policy": False,
              "boundary": config.get("boundary") or "none", "seccomp": "not attempted"}

    if config.get("boundary"):
        status["network"] = f"network namespace ({config['boundary']})"
    elif config.get("network", True):
        try:
            status["network"] = _leave_network()
        except OSError as err:  # no libc to call: report, never run silently exposed
            status["network"] = f"failed: {err}"
    status["limits"] = {
        "cpu_seconds": _limit(resource.RLIMIT_CPU, limits["cpu_seconds"], limits["cpu_seconds"] + 1),
        "memory_mb": _limit(resource.RLIMIT_AS, limits["memory_mb"] << 20) >> 20,
        "open_files": _limit(resource.RLIMIT_NOFILE, limits["open_files"]),
        "file_bytes": _limit(resource.RLIMIT_FSIZE, limits["file_bytes"]),
        "core_bytes": _limit(resource.RLIMIT_CORE, 0),
    }
    sys.path.extend(config.get("paths", []))
    _preload(config.get("preload", []), status)
    status["limits"]["processes"] = _limit(resource.RLIMIT_NPROC, limits["processes"])
    if config.get("drop_to") is not None:
        status["user"] = _drop_privileges(*config["drop_to"])
    elif config.get("boundary"):
        status["user"] = f"uid {os.geteuid()} (a user namespace)"
    if config.get("seccomp"):
        try:
            status["seccomp"] = _install_seccomp(bytes.fromhex(config["seccomp"]), config.get("seccomp_calls", 0))
        except (OSError, AttributeError) as err:  # no libc to call: report, never run silently unfiltered
            status["seccomp"] = f"failed: {err}"
    else:
        status["seccomp"] = "not available on this architecture"
    _forget_ctypes()
    os.chdir(workdir)
    read_roots = tuple(os.path.realpath(p) for p in sys.path if p and os.path.isdir(p))

    program = os.path.join(workdir, "program.py")
    with open(program, encoding="utf-8") as fh:
        source = fh.read()
    inputs = {}
    if os.path.exists("_inputs.json"):
        with open("_inputs.json", encoding="utf-8") as fh:
            inputs = json.load(fh)
    scope = {"__name__": "__main__", "__builtins__": _program_builtins(modules, policy)}
    scope.update(inputs)
    code = compile_error = None
    try:
        code = compile(source, program, "exec")
    except (SyntaxError, ValueError) as err:  # reported below like any exception of the program
        compile_error = err

    # Everything used after the program starts is bound here, in this frame the program cannot read.
    status_fd, key = config["status_fd"], os.urandom(16).hex()
    write, exit_now, exc_info, excepthook = os.write, os._exit, sys.exc_info, sys.__excepthook__
    string_io, is_subclass, memory_error, join = __import__("io").StringIO, issubclass, MemoryError, "".join
    sys_module = sys
    if policy:
        _refuse_unaudited_calls()
        sys.addaudithook(_make_hook(os.path.realpath(workdir), modules, read_roots))
        status["python_policy"] = True
    write(status_fd, (json.dumps({**status, "key": key}) + "\n").encode())

    try:
        if compile_error is not None:
            raise compile_error
        exec(code, scope)
    except SystemExit:
        raise
    except BaseException:  # noqa: BLE001 - every failure of the program is reported the same way
        exc_type, exc, tb = exc_info()
        memory = b"1" if is_subclass(exc_type, memory_error) else b"0"
        text = "<the traceback could not be formatted>"
        try:
            sys_module.stdout.flush()
            buffer = string_io()
            sys_module.stderr = buffer  # the interpreter's display writes to sys.stderr
            excepthook(exc_type, exc, tb)  # C code, the policy on: the program's __str__ runs confined
            text = join([buffer.getvalue()])  # an exact str whatever getvalue returned
        except BaseException:  # noqa: BLE001 - a program that breaks its own report gets the plain line
            pass
        del exc, tb
        try:
            write(status_fd, b"\n" + key.encode() + b" " + memory + b" " + text[-65536:].encode("utf-8", "replace"))
        finally:
            exit_now(1)  # no interpreter clean-up that could run more program code
    sys.stdout.flush()


if __name__ == "__main__":
    main()
