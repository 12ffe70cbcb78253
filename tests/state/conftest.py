import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the state tests share test_state_migrations' helpers
