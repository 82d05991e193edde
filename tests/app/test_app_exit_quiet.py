"""app.exit_quiet: Triton's teardown report is dropped, nothing before it is."""
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import os, sys, types
    from app.exit_quiet import quiet_triton_teardown
    quiet_triton_teardown()
    if {fake_triton}:
        sys.modules["triton._C.libtriton"] = types.ModuleType("triton._C.libtriton")

    class Teardown:                      # finalized with the module globals, after atexit
        def __del__(self):
            os.write(2, b"TEARDOWN-REPORT\\n")

    keep = Teardown()
    print("BEFORE-EXIT", file=sys.stderr)
    raise SystemExit(3)
""")


def _run(fake_triton: bool) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SCRIPT.format(fake_triton=fake_triton)],
                          capture_output=True, text=True, timeout=60)


def test_teardown_output_dropped_when_triton_loaded():
    done = _run(True)
    assert done.returncode == 3
    assert "BEFORE-EXIT" in done.stderr
    assert "TEARDOWN-REPORT" not in done.stderr


def test_teardown_output_kept_without_triton():
    done = _run(False)
    assert done.returncode == 3
    assert "BEFORE-EXIT" in done.stderr and "TEARDOWN-REPORT" in done.stderr
