"""Where the tests find the repository and their data, wherever a test module sits in the tree."""
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
DATA = TESTS / "data"
FIXTURES = DATA / "fixtures"
