"""The agent uses the kernel it lives in: ``kernel_tools`` and its magics in REAL kernels
(nbclient notebooks, plus a raw jupyter_client session for the stop button), driven by the
offline model's pinned phrases."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from _kernel_helpers import code_cell, execute, run_code, running_kernel, stdout_of

pytestmark = pytest.mark.kernel

CELL_TIMEOUT = 30

SETUP = """
%load_ext agentloop_nb
import asyncio, json
import agentloop_nb.jupyter as J
from agentloop_nb.llm.offline import OfflineModel
_ = ctx.llm.register_adapter(["quick"], OfflineModel(token_delay=0))
def results(agent):
    return [e.data for e in agent.session.events if e.type == "tool/result"]
def answer(agent):
    return agent.session.derive_messages()[-1].text
"""


def run_cells(workdir: Path, *sources: str) -> list[str]:
    """Execute the cells in a fresh kernel (cwd ``workdir``); returns each cell's stdout.
    Any cell error fails the test."""
    cells = execute(workdir, [code_cell(SETUP), *(code_cell(s) for s in sources)], CELL_TIMEOUT)
    return [stdout_of(c) for c in cells[1:]]


def test_list_and_inspect_variables_with_secrets_hidden_and_close_matches(tmp_path: Path) -> None:
    out = run_cells(
        tmp_path,
        """
        import pandas as pd
        sales = pd.DataFrame({"region": ["n", "s", "e"], "units": [3, 5, 7]})
        OPENAI_API_KEY = "sk-very-secret-value-123"
        def shout(word: str) -> str:
            \"\"\"Say it loud.

            More detail here.\"\"\"
            return word.upper()
        class Custom:
            def _repr_llm_(self):
                return "a custom object that explains itself"
        thing = Custom()
        %agent create a --kernel --provider quick --model m
        """,
        """
        for prompt in ["variables", "inspect sales", "inspect shout", "inspect thing",
                       "inspect OPENAI_API_KEY", "inspect sale"]:
            a.followup(prompt)
            await asyncio.wait_for(a.when_idle(), 20)
        for r in results(a):
            print(json.dumps({"error": r["is_error"], "content": r["content"]}))
        log = json.dumps([e.data for e in a.session.events], default=str)
        print("LEAK" if "sk-very-secret" in log else "NO LEAK")
        """,
    )
    lines = out[1].strip().splitlines()
    rows = [__import__("json").loads(line) for line in lines[:-1]]
    listing, sales, shout, thing, secret, unknown = rows
    assert not listing["error"]
    assert "OPENAI_API_KEY: str (secret: value hidden)" in listing["content"]
    assert "sales: DataFrame — shape 3x2" in listing["content"]
    assert "ctx" not in listing["content"].split() and "pd:" not in listing["content"]
    names = [line.split(":")[0] for line in listing["content"].splitlines()]
    assert names == sorted(names)
    assert "shape: 3 rows x 2 columns" in sales["content"]
    assert "describe()" in sales["content"] and "units" in sales["content"]
    assert "shout(word: str) -> str" in shout["content"] and "Say it loud." in shout["content"]
    assert "More detail" not in shout["content"]
    assert thing["content"] == (  # the summary, then where the value came from
        "thing = a custom object that explains itself\n"
        "origin: created by cell [2]: `thing = Custom()`"
    )
    assert secret["error"] and "secret" in secret["content"]
    assert unknown["error"] and "did you mean: sales" in unknown["content"]
    assert lines[-1] == "NO LEAK"


def test_a_registered_describer_summarises_for_inspect_read_error_and_with_until_reload(
    tmp_path: Path,
) -> None:
    cells = execute(
        tmp_path,
        [
            code_cell(SETUP),
            code_cell(
                """
                class Point:
                    def __init__(self, x):
                        self.x = x
                undo = J.kernel_tools.describe(Point, lambda p: f"a point at x={p.x}")
                pt = Point(3)
                %agent create a --kernel --provider quick --model m
                """
            ),
            code_cell("def move(p):\n    return p.y\nmove(pt)", "raises-exception"),
            code_cell(
                """
                for prompt in ["inspect pt", "use read_error {}"]:
                    a.followup(prompt)
                    await asyncio.wait_for(a.when_idle(), 20)
                for r in results(a):
                    print(json.dumps(r["content"]))
                """
            ),
            code_cell("%%agent a --with pt\nvariables"),
            code_cell(
                """
                await asyncio.wait_for(a.when_idle(), 20)
                users = [e.data for e in a.session.events if e.type == "user/message"]
                print(json.dumps(users[-1], default=str))
                %reload_ext agentloop_nb
                print("after reload:", len(J.app().ctx.describers))
                %unload_ext agentloop_nb
                J.kernel_tools.describe(int, lambda n: "an int")
                print("unloaded:", len(J.kernel.shell_describers(get_ipython())))
                """
            ),
        ],
        CELL_TIMEOUT,
    )
    inspected, autopsy = (
        __import__("json").loads(line) for line in stdout_of(cells[3]).splitlines()
    )
    assert inspected.startswith("pt = a point at x=3\n")  # the describer, not the built-in
    assert "p = a point at x=3" in autopsy  # the failing frame's local, same registry
    attached, reloaded, unloaded = stdout_of(cells[5]).splitlines()
    assert "pt = a point at x=3" in attached
    # The registry is the kernel's (kept on its shell): a reload keeps the user's describer,
    # and describe works with the extension unloaded, in the same registry.
    assert reloaded == "after reload: 1"
    assert unloaded == "unloaded: 2"


def test_run_python_approved_creates_names_captures_output_and_a_plot(tmp_path: Path) -> None:
    out = run_cells(
        tmp_path,
        """
        import pandas as pd
        import matplotlib
        matplotlib.use("agg")
        df = pd.DataFrame({"x": [1, 2, 3]})
        TOKEN = "tok-hidden-123456"
        %agent create a --kernel --provider quick --model m
        approval = J.app().ctx.approval
        asked = []
        def approve_all():
            for p in approval.pending:
                asked.append(json.loads(p.arguments)["code"])
                approval.approve(p.call_id)
        _ = approval.subscribe(approve_all)
        """,
        """
        a.followup("run: total = df.x.sum()\\nprint('sum is', total, TOKEN)\\n"
                   "import matplotlib.pyplot as plt\\nplt.plot(df.x)\\ntotal * 10")
        await asyncio.wait_for(a.when_idle(), 20)
        r = results(a)[-1]
        text_block, *images = r["content"]
        print(json.dumps(text_block["text"]))
        print(r["is_error"], len(images), images[0]["media_type"], images[0]["type"])
        print(a.session.derive_messages()[-2].images[0].data[:8])
        print(asked[0].splitlines()[0])
        print(answer(a))
        """,
        "print('next cell sees', total)",
        """
        a.followup("run: 1/0")
        await asyncio.wait_for(a.when_idle(), 20)
        r = results(a)[-1]
        print(r["is_error"], r["error"]["code"])
        print(r["content"])
        """,
    )
    content = __import__("json").loads(out[1].splitlines()[0])
    assert "value: np.int64(60)" in content or "value: 60" in content
    assert "stdout:\nsum is 6 [secret]" in content
    assert "names: plt, total" in content
    assert "tok-hidden" not in out[1]
    assert out[1].splitlines()[1] == "False 1 image/png image"
    assert out[1].splitlines()[2] == "iVBORw0K"  # a PNG, base64
    assert out[1].splitlines()[3] == "total = df.x.sum()"
    assert out[1].splitlines()[4].startswith("The result is value:")
    assert out[2].strip() == "next cell sees 6"  # and the run's print did not land here
    assert "sum is" not in "".join(out[2:])
    error_lines = out[3].splitlines()
    assert error_lines[0] == "True TOOL_ERROR"
    assert "ZeroDivisionError: division by zero" in out[3]
    assert '<run_python>", line 1' in out[3]


def test_run_python_denied_runs_nothing_and_never_mode_does_not_register(tmp_path: Path) -> None:
    out = run_cells(
        tmp_path,
        """
        %agent create a --kernel --provider quick --model m
        %agent create b --kernel --run never --provider quick --model m
        approval = J.app().ctx.approval
        _ = approval.subscribe(lambda: [approval.deny(p.call_id) for p in approval.pending])
        """,
        """
        a.followup("run: created = 1")
        await asyncio.wait_for(a.when_idle(), 20)
        r = results(a)[-1]
        print(r["is_error"], r["error"]["code"], "created" in globals())
        print(sorted(t.name for t in ctx.tools.definitions(b)))
        b.followup("run: created = 2")
        await asyncio.wait_for(b.when_idle(), 20)
        print("created" in globals(), results(b))
        """,
    )
    lines = out[1].splitlines()
    assert lines[0] == "True DENIED False"
    assert lines[1] == "['inspect_variable', 'list_variables', 'notebook_history', 'read_error']"
    assert lines[2] == "False []"


def test_notebook_history_with_prompt_blocks_and_tool_replacement(tmp_path: Path) -> None:
    out = run_cells(
        tmp_path,
        """
        import numpy as np
        values = np.arange(12).reshape(3, 4)
        values.sum()
        """,
        """
        %agent create a --kernel --run always --provider quick --model m
        a.followup("history")
        await asyncio.wait_for(a.when_idle(), 20)
        print(results(a)[-1]["content"])
        """,
        """
        %%agent a --with values
        inspect values
        """,
        """
        await asyncio.wait_for(a.when_idle(), 20)
        user = [m for m in a.session.derive_messages() if m.role == "user"][-1]
        print(json.dumps([b.text for b in user.content]))
        """,
        """
        def greet(name: str) -> str:
            \"\"\"Greet someone.\"\"\"
            return "hello " + name
        %agent tool greet --agent a
        """,
        """
        def greet(name: str, excited: bool = False) -> str:
            \"\"\"Greet someone, maybe excitedly.\"\"\"
            return "HELLO " + name
        %agent tool greet --agent a
        print([(t.name, t.description) for t in ctx.tools.definitions(a) if t.name == "greet"])
        """,
        "%agent tool nosuch --agent a",
    )
    history = out[1]
    assert "values = np.arange(12).reshape(3, 4)" in history
    assert "Out:\nnp.int64(66)" in history
    blocks = __import__("json").loads(out[3])
    assert len(blocks) == 2 and blocks[1] == "inspect values"
    assert blocks[0].startswith("values = type: numpy.ndarray")
    assert "shape: (3, 4), dtype: int64" in blocks[0] and "min: 0, max: 11" in blocks[0]
    assert "registered" in out[4]
    assert out[5].strip().splitlines()[-1] == "[('greet', 'Greet someone, maybe excitedly.')]"


def test_stop_button_interrupts_run_python_and_the_turn_ends_aborted(tmp_path: Path) -> None:
    with running_kernel(tmp_path) as (km, kc):

        def run(code: str) -> tuple[dict[str, Any], str]:
            return run_code(kc, code, CELL_TIMEOUT)

        reply, _ = run(
            SETUP
            + "%agent create a --kernel --run always --provider quick --model m\n"
            + 'a.followup(\'run: import time\\nopen("started", "w").close()\\n'
            + "while True: time.sleep(0.01)')\n"
        )
        assert reply["status"] == "ok", reply
        started = tmp_path / "started"
        deadline = time.monotonic() + 20
        while not started.exists():  # the model's code signals it is running through a file
            assert time.monotonic() < deadline, "run_python never started"
            time.sleep(0.02)
        km.interrupt_kernel()
        reply, out = run("""
            await asyncio.wait_for(a.when_idle(), 10)
            r = results(a)[-1]
            print(r["is_error"], "KeyboardInterrupt" in r["content"])
            print([e.data["reason"]["kind"] for e in a.session.events if e.type == "turn/end"])
        """)
        assert reply["status"] == "ok", reply
        assert out.splitlines() == ["True True", "['aborted']"]
