"""The sandbox's child side: confine this process, then run the program. Standard library only.

Started by tools/sandbox/run.py as `python -I -S bootstrap.py CONFIG_JSON` in a new session,
with a scrubbed environment, stdin from /dev/null and the working directory prepared. In
order, before any program code runs:

  1. leave the network: a new network namespace (unshare), or a user + network namespace
     when not root; the parent is told whether it worked;
  2. kernel limits (resource): CPU time, address space, open files, file size, no core files;
  3. import the allowed modules the program names (numpy, pandas too) while their own imports
     are free of the policy;
  4. process limit, then drop root to the unprivileged sandbox user (no writes to anything
     that user cannot write; RLIMIT_NPROC holds for it);
  5. report what took effect on the status pipe, and close it;
  6. the Python policy: an audit hook refusing processes, sockets, ctypes, frame and gc
     introspection, file access outside the working directory and the loading of any
     module not whitelisted; a restricted `__import__` for the program itself.
Then the program (program.py in the working directory) runs with `records`-style inputs
from _inputs.json as globals. An exception prints a short traceback and exits 1.
"""

import json
import os
import resource
import sys
import traceback  # loaded before the policy: it reports the program's exceptions

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
    "sqlite3.", "marshal.load", "pickle.find_class", "builtins.input", "setopencodehook",
)


def _leave_network() -> str:
    """A new, empty network namespace for this process; returns how, or why not."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) == 0:
        outcome = "network namespace"
    elif os.geteuid() != 0 and libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:
        outcome = "user and network namespace"
    else:
        outcome = "failed: " + os.strerror(ctypes.get_errno())
    del libc
    for name in [m for m in sys.modules if m == "ctypes" or m.startswith("ctypes.") or m == "_ctypes"]:
        del sys.modules[name]  # the program must not find it loaded (the audit hook refuses it anyway)
    return outcome


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


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _install_policy(workdir: str, modules: set[str], read_roots: list[str], state: dict) -> None:
    """The audit hook. `state["trusted"]` lets this bootstrap format a traceback (it reads frames)."""
    refused = _REFUSED_EVENTS

    def refuse(what: str, hint: str = ""):
        raise PermissionError(f"sandbox: {what} is not allowed{hint}")

    def hook(event: str, args: tuple) -> None:
        if state["trusted"]:
            return
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            if isinstance(path, int):
                return  # an already open descriptor
            real = os.path.realpath(os.fsdecode(path))
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND))
            if _inside(real, workdir):
                return
            if not writing and any(_inside(real, root) for root in read_roots):
                return  # the interpreter's own library files (lazy imports)
            refuse(f"{'writing' if writing else 'reading'} {real}", " (only files in the working directory)")
        elif event == "import":
            name = str(args[0])
            if name.split(".")[0] not in modules:
                refuse(f"loading module {name!r}")
        elif event.startswith(refused):
            refuse(event)

    sys.addaudithook(hook)


def _restricted_import(modules: set[str], real_import):
    allowed = ", ".join(sorted(modules))

    def import_(name, globals=None, locals=None, fromlist=(), level=0):
        if level != 0 or name.split(".")[0] not in modules:
            raise ImportError(f"sandbox: module {name!r} is not allowed (allowed: {allowed})")
        return real_import(name, globals, locals, fromlist, level)

    return import_


def _program_builtins(modules: set[str], policy: bool) -> dict:
    import builtins

    table = dict(builtins.__dict__)
    if policy:
        table["__import__"] = _restricted_import(modules, builtins.__import__)
        for name in ("breakpoint", "input", "help", "exit", "quit", "copyright", "credits", "license"):
            table.pop(name, None)
    return table


def _short_traceback(program: str, state: dict) -> str:
    """The exception's frames inside the program only, and its last line."""
    state["trusted"] = True
    try:
        exc_type, exc, tb = sys.exc_info()
        frames = [f for f in traceback.extract_tb(tb) if f.filename == program]
        lines = ["Traceback (most recent call last):\n"] + traceback.format_list(frames)
        lines += traceback.format_exception_only(exc_type, exc)
        return "".join(lines)
    finally:
        state["trusted"] = False


def main() -> None:
    config = json.loads(sys.argv[1])
    workdir = config["workdir"]
    limits = config["limits"]
    modules = set(limits["modules"])
    status = {"network": "not attempted", "user": "unchanged", "limits": {}, "modules": [], "python_policy": False}

    if config.get("network", True):
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
    for name in config.get("preload", []):
        try:
            __import__(name)
            status["modules"].append(name)
        except ImportError:
            continue  # not installed here: a program importing it gets ImportError
        except MemoryError:
            status["modules_failed"] = status.get("modules_failed", []) + [name]
    status["limits"]["processes"] = _limit(resource.RLIMIT_NPROC, limits["processes"])
    if config.get("drop_to") is not None:
        status["user"] = _drop_privileges(*config["drop_to"])
    os.chdir(workdir)
    read_roots = [os.path.realpath(p) for p in sys.path if p and os.path.isdir(p)]
    state = {"trusted": False}
    if limits.get("python_policy", True):
        _install_policy(os.path.realpath(workdir), modules, read_roots, state)
        status["python_policy"] = True
    with os.fdopen(config["status_fd"], "w") as pipe:
        json.dump(status, pipe)

    program = os.path.join(workdir, "program.py")
    with open(program, encoding="utf-8") as fh:
        source = fh.read()
    inputs = {}
    if os.path.exists("_inputs.json"):
        with open("_inputs.json", encoding="utf-8") as fh:
            inputs = json.load(fh)
    scope = {"__name__": "__main__", "__builtins__": _program_builtins(modules, limits.get("python_policy", True))}
    scope.update(inputs)
    try:
        exec(compile(source, program, "exec"), scope)
    except SystemExit:
        raise
    except BaseException:  # noqa: BLE001 - every failure of the program is reported the same way
        sys.stdout.flush()
        sys.stderr.write(_short_traceback(program, state))
        sys.stderr.flush()
        os._exit(1)  # no interpreter clean-up that could run more program code
    sys.stdout.flush()


if __name__ == "__main__":
    main()
