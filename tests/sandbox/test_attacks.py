"""Hostile programs against the sandbox (issue 26): each tries to read a canary outside its working
directory, write outside it, list other sandboxes, outlive the wall clock, make `run_python` raise
or forge its result. Every one must fail cleanly (a result with a one-line error, the attack's goal
not reached), within the wall clock + 2 s, leaving no process behind (checked with ps)."""

import os
import subprocess
import tempfile
import time

import pytest

from tools.sandbox import SandboxLimits, run_python
from tests.kernel_sandbox import needs_kernel_sandbox

pytestmark = needs_kernel_sandbox

WALL = 2.0
LIMITS = SandboxLimits(cpu_seconds=1, wall_seconds=WALL, memory_mb=512, output_bytes=50_000)
NO_POLICY = SandboxLimits(cpu_seconds=1, wall_seconds=WALL, memory_mb=512, output_bytes=50_000, python_policy=False)
SECRET = "CANARY-91d2"
OS = "import statistics\nos = statistics.sys.modules['os']\nsys = statistics.sys\n"
ESCAPE = f"/tmp/dossier-attack-escape-{os.getpid()}"

# (name, program, what it must not achieve); CANARY and ESCAPE are globals of every program
ATTACKS = [
    # read a canary outside the working directory
    ("read directly", "print(open(CANARY).read())", "leak"),
    ("read by bytes path", "print(open(CANARY.encode(), 'rb').read())", "leak"),
    ("read by relative path", "print(open('../' * 12 + CANARY.lstrip('/')).read())", "leak"),
    ("read through __str__ while the traceback is formatted",
     "class E(Exception):\n    def __str__(self):\n        return open(CANARY).read()\nraise E()", "leak"),
    ("read through __repr__ in a KeyError", "class K:\n    def __repr__(self):\n        return open(CANARY).read()\n"
     "raise KeyError(K())", "leak"),
    ("read through an exception note", "class N(str):\n    def __str__(self):\n        return open(CANARY).read()\n"
     "e = ValueError('x')\ne.add_note(N('n'))\nraise e", "leak"),
    ("read through the cause's __str__", "class E(Exception):\n    def __str__(self):\n        return open(CANARY).read()\n"
     "raise ValueError('x') from E()", "leak"),
    ("read with an __fspath__ that answers twice",
     "class P:\n    n = 0\n    def __fspath__(self):\n        P.n += 1\n        return CANARY if P.n == 1 else 'program.py'\n"
     "print(open(P()).read())", "leak"),
    ("read after patching os.path.realpath", OS + "os.path.realpath = lambda p, **k: os.getcwd() + '/x'\n"
     "print(open(CANARY).read())", "leak"),
    ("read after patching builtins the hook uses", "b = print.__self__\nb.str = lambda x: 'x'\n"
     "b.isinstance = lambda *a: True\nb.any = lambda *a: False\nprint(open(CANARY).read())", "leak"),
    ("read through os.open with a dir_fd", OS + "fd = os.open(os.path.dirname(statistics.__file__), os.O_RDONLY)\n"
     "rel = '../' * 12 + CANARY.lstrip('/')\nprint(os.read(os.open(rel, os.O_RDONLY, dir_fd=fd), 100))", "leak"),
    ("read with numpy", "import numpy as np\nprint(np.fromfile(CANARY, dtype=np.uint8).tobytes())", "leak"),
    ("read with pandas", "import pandas as pd\nprint(pd.read_csv(CANARY, header=None))", "leak"),
    ("read with pandas' pyarrow engine (native file access)",
     "import pandas as pd\nprint(pd.read_csv(CANARY, engine='pyarrow', header=None))", "leak"),
    ("read with io.open_code", OS + "print(sys.modules['io'].open_code(CANARY).read())", "leak"),
    ("read another process's command line", "print(open('/proc/1/cmdline').read(), open('/proc/self/environ').read())",
     "fail"),
    ("walk frames to the bootstrap's locals", "def g():\n    yield 1\nx = g()\nf = x.gi_frame\n"
     "while f.f_back:\n    f = f.f_back\nprint(f.f_locals)", "fail"),
    ("frames through sys._getframe", OS + "print(sys._getframe().f_back)", "fail"),
    ("frames through a traceback", "try:\n    1 / 0\nexcept Exception as e:\n    print(e.__traceback__.tb_frame.f_back)",
     "fail"),
    ("widen the whitelist through the import's closure",
     "cells = [c.cell_contents for c in (__import__.__closure__ or ()) if isinstance(c.cell_contents, set)]\n"
     "[c.update({'os'}) for c in cells]\nimport os\nprint('escaped')", "fail"),
    ("replace the import's defaults", "__import__.__defaults__ = (None, None, (), 0, print.__self__.__import__, "
     "ImportError)\nimport os", "fail"),
    ("load ctypes behind the import", "print.__self__.__import__('ctypes').CDLL(None)", "fail"),
    ("remove the audit hook's grip with settrace", OS + "sys.settrace(lambda *a: None)", "fail"),
    ("add an audit hook of its own, then read", OS + "sys.addaudithook(lambda *a: None)\nprint(open(CANARY).read())",
     "leak"),
    ("read gc's view of every object", "gc = print.__self__.__import__('gc')\nprint(len(gc.get_objects()))", "fail"),
    # write outside the working directory
    ("write to /tmp", "open(ESCAPE, 'w').write('x')", "escape"),
    ("write from __str__ while the traceback is formatted",
     "class E(Exception):\n    def __str__(self):\n        open(ESCAPE, 'w').write('x')\n        return 'x'\nraise E()",
     "escape"),
    ("write with os.open", OS + "os.write(os.open(ESCAPE, os.O_WRONLY | os.O_CREAT), b'x')", "escape"),
    ("write with pandas", "import pandas as pd\npd.DataFrame({'a': [1]}).to_csv(ESCAPE)", "escape"),
    ("write from a finalizer at exit", "class F:\n    def __del__(self):\n        open(ESCAPE, 'w').write('x')\n"
     "keep = F()\nraise SystemExit(2)", "escape"),
    # list other working directories
    ("list /tmp", OS + "print(os.listdir('/tmp'))", "fail"),
    ("scan /tmp", OS + "print(list(os.scandir('/tmp')))", "fail"),
    ("change to / and list", OS + "os.chdir('/')\nprint(os.listdir('.'))", "fail"),
    ("open /tmp as a directory", OS + "fd = os.open('/tmp', os.O_RDONLY)\nos.fchdir(fd)\nprint(os.listdir('.'))", "fail"),
    # outlive the wall clock with no CPU
    ("close the output and block on a pipe", OS + "os.close(1)\nos.close(2)\nr, w = os.pipe()\nos.read(r, 1)",
     "timeout"),
    ("block on a lock", OS + "lock = sys.modules['_thread'].allocate_lock()\nlock.acquire()\nlock.acquire()", "timeout"),
    ("new session, then block", OS + "try:\n    os.setsid()\nexcept OSError:\n    pass\nr, w = os.pipe()\nos.read(r, 1)",
     "timeout"),
    ("block inside __str__ while the traceback is formatted", OS + "class E(Exception):\n    def __str__(self):\n"
     "        r, w = os.pipe()\n        os.read(r, 1)\nraise E()", "timeout"),
    # make run_python raise, or forge what it reports
    ("junk on the status pipe", OS + "for fd in range(3, 30):\n    try:\n        os.write(fd, b'{not json\\n\\xff' * 999)\n"
     "    except OSError:\n        pass\nraise SystemExit(4)", "fail"),
    ("close every descriptor", OS + "os.closerange(0, 64)\nraise SystemExit(5)", "fail"),
    ("forge a MemoryError outcome", OS + "for fd in range(3, 30):\n    try:\n"
     "        os.write(fd, b'\\n' + b'0' * 32 + b' 1 MemoryError: forged')\n    except OSError:\n        pass\n"
     "os.write(2, b'MemoryError\\n')\nraise SystemExit(1)", "not memory"),
    ("invalid UTF-8 output", OS + "os.write(1, b'\\xff\\xfe\\x00')\nos.write(2, b'\\xc3')\nraise SystemExit(6)", "fail"),
    ("a huge exception message", "raise ValueError('x' * 10_000_000)", "fail"),
    ("recursion", "def f():\n    return f()\nf()", "fail"),
    ("abort", OS + "os.abort()", "fail"),
]


def _ours() -> list[str]:
    """Sandbox processes descended from this test process (bubblewrap and the program under it)."""
    out = subprocess.run(["ps", "-eo", "pid,ppid,stat,args"], capture_output=True, text=True).stdout
    rows = [line.split(None, 3) for line in out.splitlines()[1:]]
    parent = {int(row[0]): int(row[1]) for row in rows}

    def descends(pid: int) -> bool:
        while pid > 1:
            pid = parent.get(pid, 0)
            if pid == os.getpid():
                return True
        return False

    return [" ".join(row) for row in rows if len(row) == 4 and descends(int(row[0]))
            and ("tools/sandbox/bootstrap.py" in row[3] or row[3].startswith(("bwrap", "/usr/bin/bwrap")))]


@pytest.fixture(scope="module")
def canary():
    fd, path = tempfile.mkstemp(prefix="dossier-attack-canary-", dir="/tmp")
    os.write(fd, f"{SECRET} root:x:0:0\n".encode())
    os.close(fd)
    os.chmod(path, 0o644)
    yield path
    os.unlink(path)


def test_there_are_at_least_25_attacks():
    assert len(ATTACKS) >= 25


@pytest.mark.parametrize("name,program,goal", ATTACKS, ids=[a[0] for a in ATTACKS])
def test_attack_fails_cleanly(name, program, goal, canary):
    if os.path.exists(ESCAPE):
        os.unlink(ESCAPE)
    start = time.monotonic()
    result = run_python(program, inputs={"CANARY": canary, "ESCAPE": ESCAPE}, limits=LIMITS)
    elapsed = time.monotonic() - start
    try:
        assert elapsed < WALL + 2, f"{name}: took {elapsed:.1f} s"
        assert _ours() == [], f"{name}: left {_ours()}"
        assert not result.ok and result.kind and result.error and "\n" not in result.error, result
        assert all(SECRET not in (t or "") for t in (result.stdout, result.stderr, result.error)), result
        assert not os.path.exists(ESCAPE), f"{name}: wrote {ESCAPE}"
        if goal == "timeout":
            assert result.kind == "timeout", result
        if goal == "not memory":
            assert result.kind == "exit", result
    finally:
        if os.path.exists(ESCAPE):
            os.unlink(ESCAPE)


def test_a_real_time_signal_is_a_result_not_an_exception():
    result = run_python("import os\nos.kill(os.getpid(), 50)", limits=NO_POLICY)
    assert result.kind == "signal" and "SIGRTMIN+" in result.error and _ours() == []


@pytest.mark.parametrize("call", ["os.mknod(ESCAPE)", "os.mkfifo(ESCAPE)", "__import__('posix').mknod(ESCAPE)",
                                  "os.mknod(ESCAPE, 0o600 | 0o010000)"])
def test_mknod_and_mkfifo_cannot_create_a_file_outside(call):
    # they raise no audit event, so the bootstrap replaces them before the program runs
    try:
        result = run_python(OS + call, inputs={"ESCAPE": ESCAPE}, limits=LIMITS)
        assert not os.path.exists(ESCAPE)
        assert result.kind == "exception" and ("not allowed" in result.error), result
        assert _ours() == []
    finally:
        if os.path.exists(ESCAPE):
            os.unlink(ESCAPE)
