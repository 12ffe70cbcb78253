"""The command's output handed on in whole lines (`spotrun.agent.lines`), so that nothing written beside it (the
agent's own lines, another node's text in `spotrun logs -f`) lands inside a line."""

from __future__ import annotations

import os

from spotrun.agent.process import CommandProcess


def test_lines_are_handed_on_whole_and_a_line_that_waits_too_long_or_grows_too_long_still_comes(tmp_path):
    """Output was handed on as each read returned it: the agent's own line could land inside a command's line."""
    arrived: list[str] = []
    command = ("printf 'half '; sleep 0.3; printf 'line\\n10%%\\r20%%\\r'; printf 'prompt> '; sleep 2; "
               "head -c 70000 /dev/zero | tr '\\0' x; sleep 2; echo")
    process = CommandProcess(command, tmp_path, dict(os.environ), arrived.append).start()
    assert process.wait(20) == 0 and process.drain_output(5)
    texts = [text for text in arrived if text]
    prompt = texts.index("prompt> ")  # handed on alone, once no more output came for a while
    assert "".join(texts[:prompt]) == "half line\n10%\r20%\r"  # a progress bar's redraws flow, each whole
    assert all(text.endswith(("\n", "\r")) for text in texts[:prompt]), texts[:prompt]
    assert "".join(texts[prompt + 1 : -1]) == "x" * 70000 and texts[-1] == "\n"  # over 64 KiB: on in pieces
