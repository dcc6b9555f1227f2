"""Coverage-guided fuzzing of everything a peer's bytes reach (`make fuzz`, atheris/libFuzzer).

One harness per module below, each a `TestOneInput(data: bytes)` that raises only when the code under
test breaks its contract (an exception it does not document, or a result that would stall or corrupt
its caller). The harnesses read their input through `fuzz.provider.Input`, not atheris's
FuzzedDataProvider, so `tests/unit/test_fuzz_smoke.py` runs them without atheris.

    python -m fuzz.run [--seconds 60] [target ...]      # what `make fuzz` runs
    python -m fuzz.run --repro TARGET FILE               # replay one input, with its traceback
    python -m fuzz.seeds                                 # rewrite fuzz/corpus/ from our encoders
"""

TARGETS = (
    "remoting_frame",
    "json_header",
    "register_body",
    "ha_wire",
    "record_scan",
    "send_fastpath",
    "dledger_rpc",
    "dledger_entry",
    "acl_request",
)
