"""Start, audit and report a session from Python, offline.

Run it as a script (``python docs/examples/python_api.py [DIR]``) or cell by cell in a notebook.
The scripted provider of ``forge_ledger.testing`` answers for the four participants of the
bundled ``four-voices`` script, so nothing reaches a model and no key is needed; with
``provider=None`` (the default) the same calls go to the models through litellm.
"""

import sys
import tempfile
from pathlib import Path

import forge_ledger
from forge_ledger import FixedStepClock, Participant, SequentialIds, SessionConfig, Topic
from forge_ledger.testing import ScriptedProvider

# %% Where the store lives: a SQLite file (created if missing) or a postgresql:// URL.
where = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp())
store = where / "forge-ledger.sqlite"

# %% Who deliberates: the script answers each participant by name.
participants = [
    Participant(name="alice", model="openai/alice", role="drafter"),
    Participant(name="bob", model="openai/bob", role="critic"),
    Participant(name="carol", model="openai/carol", role="synthesizer"),
    Participant(name="dave", model="openai/dave", role="devils_advocate"),
]
topic = Topic(
    title="Event log for multi-model deliberations",
    description="Design the storage of a tool where several models draft, critique and vote.",
)

# %% Run it: a fixed clock and sequential ids make the session the same on every run.
with forge_ledger.open(
    store,
    clock=FixedStepClock(),
    ids=SequentialIds(),
    provider=ScriptedProvider.from_script("four-voices"),
) as forge:
    state = forge.start(topic, participants, SessionConfig(max_rounds=12))
    print(f"{state.id[:8]}: {state.status.value} after {state.iteration} iteration(s)")

    # %% How consensus formed: the same audit as `forge-ledger audit`.
    audit = forge.audit(state.id)
    print(
        f"{len(audit.stance_shifts)} stance shift(s), {len(audit.conformity)} flagged as "
        f"conformity, {len(audit.dissent)} dissent(s) recorded"
    )

    # %% The audit as one self-contained HTML page, as `forge-ledger report` writes it.
    page = forge.report(state.id, path=where / "report.html")
    print(f"report: {page.path}")

    # %% Every session in the store.
    for summary in forge.sessions():
        print(summary.id[:8], summary.status, summary.title)
