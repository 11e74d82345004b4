"""Chapter 6's pipelines, drawn: the ensemble from its config, the BLS model's branches.

The ensemble's picture is read from ``config.pbtxt`` (steps, and the tensors that join
them), so it changes when the config does. The BLS model's flow is code, not
configuration; its picture follows ``model_repository/face_restore_bls/1/model.py``.
"""

from __future__ import annotations

BOX = dict(boxstyle="round,pad=0.35", facecolor="#eef3fb", edgecolor="#34558b")
END = dict(boxstyle="round,pad=0.35", facecolor="white", edgecolor="grey")
CHOICE = dict(boxstyle="round4,pad=0.35", facecolor="#fff4e0", edgecolor="#b07000")


def ensemble_edges(config: dict) -> dict[tuple[str, str], list[str]]:
    """(from, to) -> the ensemble tensor names on that edge, for an ensemble config.

    "request" produces the ensemble's inputs and "response" takes its outputs; a step
    produces the tensors of its ``output_map`` and reads those of its ``input_map``.
    """
    producer = {tensor["name"]: "request" for tensor in config["input"]}
    edges: dict[tuple[str, str], list[str]] = {}
    for step in config["ensemble_scheduling"]["step"]:
        for tensor in step["input_map"].values():
            if tensor not in producer:
                raise ValueError(f"step {step['model_name']} reads {tensor!r}, which nothing "
                                 "produces before it")
            edges.setdefault((producer[tensor], step["model_name"]), []).append(tensor)
        for tensor in step["output_map"].values():
            producer[tensor] = step["model_name"]
    for tensor in config["output"]:
        edges.setdefault((producer[tensor["name"]], "response"), []).append(tensor["name"])
    # Sorted: protobuf maps (input_map, output_map) keep no order.
    return {edge: sorted(tensors) for edge, tensors in edges.items()}


def _arrow(ax, start, end, label, rad=0.0, color="#34558b"):
    (x1, y1), (x2, y2) = start, end
    ax.annotate("", xy=(x2, y2), xytext=(x1, y1),
                arrowprops=dict(arrowstyle="->", color=color, lw=1.3, shrinkA=34, shrinkB=34,
                                connectionstyle=f"arc3,rad={rad}"))
    # The middle of matplotlib's arc3 curve: half way to its control point.
    x = (x1 + x2) / 2 + rad * (y2 - y1) / 2
    y = (y1 + y2) / 2 - rad * (x2 - x1) / 2
    below = rad > 0
    ax.text(x, y - 0.1 if below else y + 0.1, label, ha="center",
            va="top" if below else "bottom", fontsize=8, color=color, family="monospace")


def _node(ax, xy, text, style=BOX):
    ax.text(*xy, text, ha="center", va="center", fontsize=9, bbox=style)


def draw_pipelines(ensemble_config: dict):
    """Two panels: the ensemble's steps and tensors, and the BLS model's calls with its
    early exit for a picture without faces."""
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6.2))
    steps = [step["model_name"] for step in ensemble_config["ensemble_scheduling"]["step"]]
    names = ["request", *steps, "response"]
    place = {name: (2.2 * i, 0.0) for i, name in enumerate(names)}
    for name, xy in place.items():
        _node(top, xy, name, END if name in ("request", "response") else BOX)
    for (source, target), tensors in ensemble_edges(ensemble_config).items():
        hops = names.index(target) - names.index(source)
        # Neighbours: a straight arrow; a tensor that skips steps: an arc above them.
        rad = 0.0 if hops == 1 else -0.2 - 0.05 * hops
        _arrow(top, place[source], place[target], "\n".join(tensors), rad)
    top.set_title("Ensemble: every step runs for every picture (from its config.pbtxt)",
                  fontsize=10)

    flow = {"request": (0.0, 0.0), "face_detect": (2.2, 0.0), "faces?": (4.4, 0.0),
            "gfpgan": (6.6, 0.0), "face_paste": (8.8, 0.0), "response": (11.0, 0.0)}
    for name, xy in flow.items():
        style = END if name in ("request", "response") else CHOICE if name == "faces?" else BOX
        _node(bottom, xy, name, style)
    _arrow(bottom, flow["request"], flow["face_detect"], "ENCODED | PIXELS")
    _arrow(bottom, flow["face_detect"], flow["faces?"], "BOXES")
    _arrow(bottom, flow["faces?"], flow["gfpgan"], "yes: FACES in\nchunks of <= 8,\nin parallel")
    _arrow(bottom, flow["gfpgan"], flow["face_paste"], "FACES")
    _arrow(bottom, flow["face_paste"], flow["response"], "RESTORED\nSUMMARY")
    # face_paste also gets the picture and the boxes; the response carries the boxes.
    _arrow(bottom, flow["face_detect"], flow["face_paste"], "IMAGE\nBOXES", rad=-0.35)
    _arrow(bottom, flow["face_detect"], flow["response"], "BOXES", rad=-0.4)
    _arrow(bottom, flow["faces?"], flow["response"], "no face: the picture as it came",
           rad=0.35, color="#b07000")
    bottom.set_title("BLS: face_restore_bls calls the steps from Python "
                     "(async_exec), and can skip them", fontsize=10)
    for ax, width, (low, high) in ((top, place["response"][0], (-0.5, 2.3)),
                                   (bottom, flow["response"][0], (-1.9, 2.6))):
        ax.set_xlim(-1.0, width + 1.0)
        ax.set_ylim(low, high)
        ax.set_aspect("equal")
        ax.axis("off")
    fig.tight_layout()
    return fig
