"""Figures in the IPython kernel come back as ``image/png``, as Sandbox Fusion's ipykernel returns them.

Sandbox Fusion's ``test_jupyter_plot`` plots and calls ``plt.show()`` in a cell and reads
``cells[1].display[0]['image/png']``. Jupyter's kernel gets that from matplotlib's inline backend: ``show()``
displays every open figure, a figure left open is displayed when its cell ends, and a figure that is a cell's
value is its ``execute_result``. The kernel's IPython mode must give the same bundles on every backend with a
kernel, and a cell that draws nothing must show no image.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from sandboxkit.base import Sandbox
from sandboxkit.models import Limits
from support.kernels import cell
from support.local_sandboxes import LOCAL_BACKENDS, local_sandbox
from support.marks import missing

pytestmark = pytest.mark.asyncio(loop_scope="module")

LIMITS = Limits(timeout_s=60.0, memory_mb=1024)
PLOT = "x = [1, 2, 3, 4, 5]\ny = [2, 3, 5, 7, 11]\nplt.plot(x, y)\nplt.title('Simple Plot')\n"


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=LOCAL_BACKENDS)
async def sandbox(request: pytest.FixtureRequest) -> AsyncIterator[Sandbox]:
    async for sb in local_sandbox(request.param, LIMITS):
        first = await cell(sb, "import matplotlib.pyplot as plt", timeout=60.0)
        if first.shell != "ipython" or not first.ok:
            missing(f"{request.param}: the sandbox's python3 lacks IPython or matplotlib: {first}")
        yield sb


def _pngs(bundles: list[dict[str, Any]]) -> list[bytes]:
    return [base64.b64decode(b["image/png"]) for b in bundles if "image/png" in b]


async def test_show_displays_the_figure_as_png(sandbox: Sandbox) -> None:
    shown = await cell(sandbox, PLOT + "plt.show()")
    assert shown.ok, shown
    assert "image/png" in shown.display[0], shown  # Sandbox Fusion's test_jupyter_plot reads exactly this
    [png] = _pngs(shown.display)
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert shown.display[0]["text/plain"].startswith("<Figure size"), shown.display[0]["text/plain"]
    assert shown.value is None and shown.stderr == "", shown


async def test_a_figure_left_open_is_shown_when_the_cell_ends(sandbox: Sandbox) -> None:
    drawn = await cell(sandbox, PLOT)  # no show(): the inline backend flushes it after the cell
    assert drawn.ok, drawn
    assert len(_pngs(drawn.display)) == 1, drawn
    after = await cell(sandbox, "1 + 1")  # and only once: it was closed
    assert _pngs(after.display) == [] and after.value == "2", after


async def test_a_figure_as_the_cells_value_is_an_image(sandbox: Sandbox) -> None:
    fig = await cell(sandbox, "fig, ax = plt.subplots()\nax.plot([3, 1, 2])\nfig")
    assert fig.ok, fig
    assert _pngs(fig.display), fig
    assert fig.value is not None and fig.value.startswith("<Figure size"), fig


async def test_a_silenced_cell_still_shows_its_figure(sandbox: Sandbox) -> None:
    quiet = await cell(sandbox, PLOT + "plt.xlabel('X');")  # `;` hides the Text value, not the figure
    assert quiet.ok and quiet.value is None, quiet
    assert len(_pngs(quiet.display)) == 1, quiet


async def test_matplotlib_inline_magic_is_accepted(sandbox: Sandbox) -> None:
    magic = await cell(sandbox, "%matplotlib inline")  # the first line of countless notebooks
    assert magic.ok, magic
    shown = await cell(sandbox, PLOT + "plt.show()")
    assert len(_pngs(shown.display)) == 1, shown
