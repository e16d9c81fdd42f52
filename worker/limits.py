"""The bounds a report's figures must lie within (worker/report.py's types
use them; docs/report-schema.md, "What the bot checks")."""
from __future__ import annotations

from worker import shape
from worker.shape import Range

# What a measured figure can be: past these, a report is refused (400), not
# stored (docs/report-schema.md, "What the bot checks"). Each is far beyond any
# real trial, so an honest one never comes near.
YEAR = 366 * 86400
MAX_BYTES = 2**50            # 1 PiB: more memory than any one machine has
MAX_SECONDS = YEAR           # a trial, phase, try or run longer than a year
MAX_RATE = 10**9             # per second: tokens/s or samples/s (the fastest do ~10^7)
MAX_COUNT = MAX_RATE * YEAR  # runs, tokens, retries: more than that rate makes in a year
LAST_TIME = 4102444800       # a Unix time after 2100-01-01 UTC
MAX_RATIO = 10**6            # a spread (IQR/median) or a load: nothing measured varies so
MAX_ATTEMPTS = 100           # tries of one trial (the heartbeat's `attempt` allows as many)
MAX_PHASES = 10_000          # a recipe's marks included
MAX_ITEMS = 100_000          # samples, losses, logits, timeline rows in one list
MAX_DEVICES = 1024           # GPUs or ranks of one trial
MAX_PARAMS = 200             # parameters of one spec
MAX_CORES = 65_536           # CPU cores named in one list

BYTES = Range(0, MAX_BYTES, "bytes from 0 to 1 PiB (2^50)")
SECONDS = Range(0, MAX_SECONDS, f"seconds from 0 to a year ({MAX_SECONDS:,})")
TIME = Range(0, LAST_TIME, f"a Unix time from 0 to 2100-01-01 ({LAST_TIME:,})")
COUNT = Range(0, MAX_COUNT, f"a count from 0 to {MAX_COUNT:,}")
RATE = Range(0, MAX_RATE, f"a rate from 0 to {MAX_RATE:,} per second")
FIGURE = Range(0, MAX_RATE, f"seconds or a rate, from 0 to {MAX_RATE:,}")
SHARE = Range(0, 1, "a share from 0 to 1")
PERCENT = Range(0, 100, "a percentage from 0 to 100")
RATIO = Range(0, MAX_RATIO, f"a ratio from 0 to {MAX_RATIO:,}")
TRY = Range(1, MAX_ATTEMPTS, f"a try's number from 1 to {MAX_ATTEMPTS}")
AMOUNT = Range(0, shape.MAX_MAGNITUDE, "0 to 10^18")  # arithmetic (full depth), not measured
