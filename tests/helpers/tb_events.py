"""TensorBoard event files read back (TFRecord framing, tensorboardX's protos)."""

import struct
from pathlib import Path


def summaries(run_dir: Path):
    """(step, tag, value proto) of every summary value in the run's event files."""
    from tensorboardX.proto.event_pb2 import Event

    found = []
    for path in sorted(Path(run_dir).glob("events.out.tfevents.*")):
        data = path.read_bytes()
        at = 0
        while at < len(data):
            (length,) = struct.unpack("<Q", data[at : at + 8])
            event = Event.FromString(data[at + 12 : at + 12 + length])  # past the length's CRC
            at += 12 + length + 4  # and the record's CRC
            found += [(event.step, value.tag, value) for value in event.summary.value]
    return found
