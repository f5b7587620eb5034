"""Reading a Chrome trace JSON file, for the scripts that merge and summarize timelines
(megascale-trace-merge.py, train-timeline-summary.py)."""
import json


def load(path):
    """The trace's document: a dict with a traceEvents list. ValueError naming the file otherwise."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as e:
        raise ValueError(f"{path}: cannot read: {e.strerror}") from e
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON: {e.msg} at line {e.lineno}") from e
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise ValueError(f"{path}: not a Chrome trace (no traceEvents list)")
    return doc
