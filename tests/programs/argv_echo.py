"""Test program: prints its argv as JSON (and writes it to $ECHO_OUT) and marks
phases; exits non-zero
with a MemoryError when --batch is over --fits."""
import json
import os
import sys

args = sys.argv[1:]
print("TRIALBOT_PHASE weights")
print("ARGV " + json.dumps(args), flush=True)
if os.environ.get("ECHO_OUT"):
    with open(os.environ["ECHO_OUT"], "w") as f:
        json.dump(args, f)
print("TRIALBOT_PHASE run")
if "--batch" in args and "--fits" in args:
    if int(args[args.index("--batch") + 1]) > int(args[args.index("--fits") + 1]):
        bytearray(2**44)  # 16 TiB: refused at once with MemoryError, nothing touched
