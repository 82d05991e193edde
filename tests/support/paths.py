"""Where the tests find the repository and their data, wherever a test module sits in the tree."""
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
DATA = TESTS / "data"
FIXTURES = DATA / "fixtures"


def unwritable_folder(tmp_path: Path) -> Path:
    """A folder in which no file can be created: ``tmp_path/ro`` made read-only, or (as root,
    whom permission bits do not stop) ``/sys/kernel`` (sysfs refuses new files). Skips the
    test when neither is available."""
    import os
    import tempfile

    import pytest

    if os.geteuid() != 0:
        folder = tmp_path / "ro"
        folder.mkdir()
        folder.chmod(0o555)
        return folder
    folder = Path("/sys/kernel")
    try:
        fd, probe = tempfile.mkstemp(dir=folder)
    except OSError:
        return folder
    os.close(fd)
    os.unlink(probe)
    pytest.skip("no folder refuses new files here")
