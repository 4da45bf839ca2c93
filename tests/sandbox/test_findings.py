"""One test per sandbox finding of issue 26: each reproduces the attack the review found and
asserts the sandbox now refuses it. The broader hostile-program suite is test_attacks.py."""

import os
import signal
import subprocess
import tempfile
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tools.sandbox import SandboxLimits, run_python
from tools.sandbox.run import _diagnose
from tests.kernel_sandbox import needs_kernel_sandbox

pytestmark = needs_kernel_sandbox

FAST = SandboxLimits(cpu_seconds=2, wall_seconds=10, memory_mb=512, output_bytes=100_000)
OS_ONLY = SandboxLimits(cpu_seconds=2, wall_seconds=10, memory_mb=512, output_bytes=100_000, python_policy=False)
ROOT = os.geteuid() == 0
# the whitelisted statistics module holds sys, so a program reaches every loaded module through it
OS = "import statistics\nos = statistics.sys.modules['os']\n"


@pytest.fixture()
def canary():
    """A world-readable file outside any sandbox's working directory."""
    fd, path = tempfile.mkstemp(prefix="dossier-canary-", dir="/tmp")
    os.write(fd, b"CANARY-7f3a secret\n")
    os.close(fd)
    os.chmod(path, 0o644)
    yield path
    os.unlink(path)


def leaked(result, secret: str = "CANARY-7f3a") -> bool:
    return any(secret in (text or "") for text in (result.stdout, result.stderr, result.error))


def sandbox_processes() -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "tools/sandbox/bootstrap.py" in line]


@pytest.mark.parametrize("program", [
    "class E(Exception):\n    def __str__(self):\n        return open(CANARY).read()\nraise E()",
    "class K:\n    def __repr__(self):\n        return open(CANARY).read()\nraise KeyError(K())",
    "class E(Exception):\n    def __str__(self):\n        return open(CANARY).read()\n"
    "try:\n    raise E()\nexcept E:\n    raise ValueError('during handling')",
    "class E(Exception):\n    def __str__(self):\n        return open(CANARY).read()\nraise ValueError('x') from E()",
    "class N(str):\n    def __str__(self):\n        return open(CANARY).read()\n"
    "e = ValueError('x')\ne.add_note(N('note'))\nraise e",
])
def test_finding1_policy_stays_on_while_the_traceback_is_formatted(program, canary):
    result = run_python(program, inputs={"CANARY": canary}, limits=FAST)
    assert not result.ok and not leaked(result), result
    assert result.error and "\n" not in result.error


def test_finding1_no_write_outside_from_code_run_while_the_traceback_is_formatted():
    target = f"/tmp/dossier-finding1-escape-{os.getpid()}"
    program = ("class E(Exception):\n"
               "    def __str__(self):\n"
               f"        open({target!r}, 'w').write('x')\n"
               "        return 'x'\n"
               "raise E()")
    try:
        result = run_python(program, limits=FAST)
        assert not result.ok and not os.path.exists(target), result
    finally:
        if os.path.exists(target):
            os.unlink(target)


def test_finding2_import_closure_cannot_widen_the_whitelist():
    program = ("cells = [c.cell_contents for c in (__import__.__closure__ or ()) if isinstance(c.cell_contents, set)]\n"
               "for cell in cells:\n    cell.update({'os', 'sys'})\n"
               "import os\nprint('escaped', os.getcwd())")
    result = run_python(program, limits=FAST)
    assert result.kind == "exception" and "module 'os' is not allowed" in result.error, result
    assert "escaped" not in result.stdout


def test_finding2_import_function_exposes_no_globals_or_closure():
    program = ("print(__import__.__closure__ is None)\n"
               "g = getattr(__import__, '__globals__', {})\n"
               "print(sorted(k for k in g if k in ('os', 'sys', '_restricted_import', 'main')))")
    result = run_python(program, limits=FAST)
    assert result.ok and result.stdout.split("\n")[:2] == ["True", "[]"], result


def test_finding2_the_audit_hook_names_no_global_the_program_could_replace():
    import dis
    import inspect

    from tools.sandbox.bootstrap import _make_hook, _restricted_import

    hook = _make_hook("/tmp/x", frozenset({"math"}), ("/usr/lib/python3",))
    codes = [hook.__code__, *[c for c in hook.__code__.co_consts if hasattr(c, "co_code")]]
    codes += [cell.cell_contents.__code__ for cell in hook.__closure__ if inspect.isfunction(cell.cell_contents)]
    importer = _restricted_import(frozenset({"math"}), __import__)
    codes.append(importer.__code__)
    for code in codes:
        names = [i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")]
        assert names == [], (code.co_name, names)
    assert importer.__closure__ is None and importer.__globals__ == {"__builtins__": {}}


def test_finding2_patched_modules_and_builtins_do_not_weaken_the_audit_hook(canary):
    patch_realpath = OS + "os.path.realpath = lambda p, **k: os.getcwd() + '/ok.txt'\nprint(open(CANARY).read())"
    patch_builtins = ("b = print.__self__\nb.str = lambda x: 'math'\nb.isinstance = lambda *a: True\n"
                      "b.any = lambda *a: False\nprint(open(CANARY).read())")
    for program in (patch_realpath, patch_builtins):
        result = run_python(program, inputs={"CANARY": canary}, limits=FAST)
        assert not result.ok and not leaked(result), (program, result)


def test_finding3_closed_pipes_do_not_escape_the_wall_clock():
    program = OS + "os.close(1)\nos.close(2)\nr, w = os.pipe()\nos.read(r, 1)"
    limits = SandboxLimits(cpu_seconds=2, wall_seconds=1, memory_mb=512)
    box = []
    worker = threading.Thread(target=lambda: box.append(run_python(program, limits=limits)), daemon=True)
    start = time.monotonic()
    worker.start()
    worker.join(timeout=8)
    assert not worker.is_alive(), "run_python did not return within wall clock + 7 s"
    assert time.monotonic() - start < 1 + 2
    result = box[0]
    assert result.kind == "timeout" and not result.ok, result
    assert sandbox_processes() == []


def test_finding4_a_real_time_signal_does_not_make_run_python_raise():
    result = run_python("import os\nos.kill(os.getpid(), 40)", limits=OS_ONLY)
    assert result.kind == "signal" and "signal 40" in result.error and result.exit_code == -40, result


@settings(max_examples=300, deadline=None)
@given(code=st.integers(min_value=-70, max_value=300), stopped=st.sampled_from([None, "timeout", "output"]),
       cpu=st.floats(min_value=0, max_value=20), status=st.sampled_from([{}, {"network": "x"}]),
       stderr=st.text(max_size=80))
def test_finding4_every_exit_status_and_signal_is_diagnosed_without_raising(code, stopped, cpu, status, stderr):
    kind, error = _diagnose(code, stderr, stopped, FAST, cpu, status)
    assert (kind is None) == (code == 0 and stopped is None)
    assert kind is None or (error and "\n" not in error)


def test_finding6_the_failure_kind_cannot_be_forged():
    forged_stderr = OS + "os.write(2, b'Traceback:\\nMemoryError\\n')\nraise SystemExit(1)"
    result = run_python(forged_stderr, limits=FAST)
    assert result.kind == "exit", result
    forged_message = "raise ValueError('boom\\nMemoryError: out of memory')"
    result = run_python(forged_message, limits=FAST)
    assert result.kind == "exception" and result.error.startswith("ValueError"), result
    real = run_python("x = bytearray(8 * 1024 ** 3)", limits=FAST)
    assert real.kind == "memory", real


def test_finding5_the_whitelist_works_when_used():
    program = ("import datetime, decimal, statistics\n"
               "import pandas as pd\n"
               "frame = pd.DataFrame(records)\n"
               "by_company = frame.groupby('company')['value'].sum()\n"
               "print(by_company)\n"
               "print(frame.to_csv(index=False).splitlines()[1])\n"
               "print(datetime.datetime.strptime('2022-03-31', '%Y-%m-%d').date())\n"
               "print(statistics.median(frame['value']), decimal.Decimal('0.1') + decimal.Decimal('0.2'))\n")
    records = [{"company": "Alder", "value": 120.0}, {"company": "Birch", "value": 80.0},
               {"company": "Alder", "value": 150.0}]
    result = run_python(program, inputs={"records": records}, limits=SandboxLimits(cpu_seconds=10, wall_seconds=60))
    assert result.ok, result
    lines = result.stdout.splitlines()
    assert "Alder    270.0" in lines and "Birch     80.0" in lines
    assert lines[-3:] == ["Alder,120.0", "2022-03-31", "120.0 0.3"]
