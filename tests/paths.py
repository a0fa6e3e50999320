"""Where the tests find the repository and their data, whichever folder (unit/, integration/, gpu/) a test
lives in: TESTS is tests/, ROOT the repository, TESTS / "data" the copied fixtures (tests/data/README.md)."""
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
