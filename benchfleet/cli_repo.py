"""The CLI's repository commands: models (push, ls and search, update, rm, trust, generate) and request-data sets
(push, ls, rm)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from benchfleet.calls import Described
from benchfleet.cli_common import (
    DEFAULT_URL,
    EXIT_USAGE,
    JsonOpt,
    TokenOpt,
    UrlOpt,
    WideOpt,
    call,
    client_for,
    console,
    fail,
    show,
)
from benchfleet.render import simple_sheet
from benchfleet.tables import Col, Sheet
from common.formats.datasets import DataSetMeta
from common.wire.models import ModelMeta, ModelQuery, ModelUpdate, TensorSpec

models_app = typer.Typer(no_args_is_help=True, help="The model repository.")
data_app = typer.Typer(no_args_is_help=True, help="Request-data sets (npz, JSONL, a zip of images, a trace).")


@models_app.command("push")
def models_push(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True)],
    name: Annotated[str, typer.Option()],
    version: Annotated[str, typer.Option()],
    format: str = "onnx",
    signature: Annotated[
        str | None, typer.Option(help='inputs and outputs as JSON (torchscript, savedmodel): {"inputs": [...], "outputs": [...]}')
    ] = None,
    description: Annotated[str | None, typer.Option(help="what the model is (500 characters at most)")] = None,
    tag: Annotated[list[str] | None, typer.Option("--tag", help="a tag (repeat for more)")] = None,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = "",
) -> None:
    """Upload a model file."""
    described = Described(signature=signature, description=description, tags=tag or ())
    with client_for(url, token) as client:
        meta = call(client.upload_model, file, name=name, version=version, format=format, described=described)
    console.print(f"{meta.ref} sha256={meta.sha256} size={meta.size_bytes}")


def _sig(tensors: list[TensorSpec]) -> str:
    return ", ".join(f"{t.name}:{t.datatype}{t.shape}" for t in tensors)


def models_sheet(rows: list[ModelMeta]) -> Sheet:
    """One row per model version: format, team, tags, signature, size."""
    return simple_sheet(
        (
            Col("name", right=False),
            Col("version", right=False),
            Col("format", right=False),
            Col("team", right=False, rank=4),
            Col("tags", right=False, rank=2),
            Col("inputs", right=False, rank=1),
            Col("outputs", right=False, rank=2),
            Col("size", rank=3),
            Col("sha256", right=False, rank=5),
        ),
        (
            (
                m.name,
                m.version,
                m.format,
                m.team,
                ",".join(m.tags) or "-",
                _sig(m.inputs),
                _sig(m.outputs),
                str(m.size_bytes),
                m.sha256[:12],
            )
            for m in rows
        ),
        title="models",
    )


@models_app.command("ls")
def models_ls(
    text: Annotated[str | None, typer.Option("--text", help="in the name or description, any case")] = None,
    tag: Annotated[list[str] | None, typer.Option("--tag", help="carries this tag (repeat: all of them)")] = None,
    format: Annotated[str | None, typer.Option("--format", help="stored as (onnx, torchscript, hf, ...)")] = None,  # noqa: A002
    architecture: Annotated[str | None, typer.Option(help="a language model's architecture, a canonical model's kind")] = None,
    min_parameters: Annotated[int | None, typer.Option(help="at least this many parameters")] = None,
    max_parameters: Annotated[int | None, typer.Option(help="at most this many parameters")] = None,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = "",
    as_json: JsonOpt = False,
    wide: WideOpt = False,
) -> None:
    """List (or search) models: every criterion given must hold."""
    fields: dict[str, object] = {"text": text, "tags": tag or [], "format": format, "architecture": architecture}
    fields |= {"min_parameters": min_parameters, "max_parameters": max_parameters}
    try:
        query = ModelQuery.model_validate(fields)
    except ValidationError as exc:
        fail(f"models ls: {exc.errors(include_url=False)[0]['msg']}", EXIT_USAGE)
    with client_for(url, token) as client:
        rows = call(client.models, query)
    show(rows, models_sheet, as_json=as_json, wide=wide)


@models_app.command("update")
def models_update(
    name: str,
    version: str,
    description: Annotated[str | None, typer.Option(help="what the model is (500 characters at most)")] = None,
    tag: Annotated[list[str] | None, typer.Option("--tag", help="its tags, all of them (repeat); replaces the old")] = None,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = "",
    as_json: JsonOpt = False,
) -> None:
    """Change a model's description or tags (its owner or an admin)."""
    try:
        update = ModelUpdate.model_validate({"description": description, "tags": tag})
    except ValidationError as exc:
        fail(f"models update: {exc.errors(include_url=False)[0]['msg']}", EXIT_USAGE)
    with client_for(url, token) as client:
        meta = call(client.update_model, name, version, update)
    show([meta], models_sheet, as_json=as_json)


@models_app.command("rm")
def models_rm(name: str, version: str, url: UrlOpt = DEFAULT_URL, token: TokenOpt = "") -> None:
    """Delete a model version."""
    with client_for(url, token) as client:
        call(client.delete_model, name, version)
    console.print(json.dumps({"deleted": f"{name}:{version}"}))


@models_app.command("trust")
def models_trust(
    name: str,
    version: str,
    untrust: Annotated[bool, typer.Option("--untrust", help="take the mark away")] = False,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = "",
) -> None:
    """Mark a model trusted (admins only): a follower that cannot sandbox model servers runs its code anyway."""
    with client_for(url, token) as client:
        meta = call(client.update_model, name, version, ModelUpdate(trusted=not untrust))
    console.print(json.dumps({"model": f"{meta.name}:{meta.version}", "trusted": meta.trusted}))


@data_app.command("push")
def data_push(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True)],
    name: Annotated[str, typer.Option()],
    format: Annotated[str, typer.Option(help="npz, jsonl, images (a zip), trace, or prompts (a language model's)")],
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = "",
) -> None:
    """Upload a data set; jobs name request data with `data: {source: upload, id: ID}`, a trace with
    `load.trace: {dataset: ID}` and a prompt set with `llm: {dataset: ID}`."""
    with client_for(url, token) as client:
        meta = call(client.upload_data, file, name=name, format=format)
    console.print(f"{meta.id} name={meta.name} format={meta.format} samples={meta.samples} sha256={meta.sha256}")


def data_sheet(rows: list[DataSetMeta]) -> Sheet:
    """One row per data set: its id (what jobs name), format, size and owner."""
    return simple_sheet(
        (
            Col("id", right=False),
            Col("name", right=False),
            Col("format", right=False),
            Col("samples"),
            Col("fields", right=False, rank=2),
            Col("size", rank=3),
            Col("sha256", right=False, rank=5),
            Col("owner", right=False, rank=1),
            Col("team", right=False, rank=4),
        ),
        (
            (d.id, d.name, d.format, str(d.samples), ", ".join(d.fields), str(d.size_bytes), d.sha256[:12], d.owner, d.team)
            for d in rows
        ),
        title="data sets",
    )


@data_app.command("ls")
def data_ls(url: UrlOpt = DEFAULT_URL, token: TokenOpt = "", as_json: JsonOpt = False, wide: WideOpt = False) -> None:
    """List request-data sets."""
    with client_for(url, token) as client:
        rows = call(client.data_sets)
    show(rows, data_sheet, as_json=as_json, wide=wide)


@data_app.command("rm")
def data_rm(data_id: str, url: UrlOpt = DEFAULT_URL, token: TokenOpt = "") -> None:
    """Delete a request-data set (its owner or an admin)."""
    with client_for(url, token) as client:
        call(client.delete_data, data_id)
    console.print(json.dumps({"deleted": data_id}))


@models_app.command("generate")
def models_generate(
    kind: Annotated[str, typer.Argument(help="fc, conv, lstm or attention (tensor models); llama (a language model)")],
    depth: int = 2,
    width: int = 64,
    input_size: int = 32,
    layers: Annotated[int, typer.Option(help="llama: decoder layers")] = 4,
    hidden: Annotated[int, typer.Option(help="llama: hidden size")] = 256,
    heads: Annotated[int, typer.Option(help="llama: attention heads")] = 4,
    kv_heads: Annotated[int | None, typer.Option(help="llama: key/value heads (default: heads)")] = None,
    intermediate: Annotated[int | None, typer.Option(help="llama: MLP size (default: 2 x hidden)")] = None,
    vocab: Annotated[int, typer.Option(help="llama: tokenizer vocabulary, trained on the spot")] = 4096,
    context: Annotated[int, typer.Option(help="llama: context length in tokens")] = 2048,
    head: Annotated[str, typer.Option(help="llama: lm (a language model) or score (a reranker, for llm.api rerank)")] = "lm",
    seed: int = 0,
    out: Annotated[Path | None, typer.Option(help="where to write the bundle (default: NAME.zip)")] = None,
    push: Annotated[bool, typer.Option(help="upload the bundle to the leader")] = False,
    name: Annotated[str | None, typer.Option(help="repository name (default: canon-KIND-dD-wW-sS, llama-lL-hH-vV-sS)")] = None,
    version: str = "1",
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = "",
) -> None:
    """Generate a canonical model: a tensor model (ONNX + TorchScript bundle, both checked against PyTorch; needs the
    torch extra), or `llama`, a small decoder with seeded random weights and its own tokenizer (format hf)."""
    from benchfleet import generate

    try:
        made = (
            generate.llama(
                layers=layers,
                hidden=hidden,
                heads=heads,
                kv_heads=kv_heads,
                intermediate=intermediate,
                vocab=vocab,
                context=context,
                seed=seed,
                head=head,
            )
            if kind == "llama"
            else generate.canonical(kind, depth=depth, width=width, input_size=input_size, seed=seed)
        )
    except ValueError as exc:  # a shape or kind that cannot be made, named
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(EXIT_USAGE) from None
    name, model_format = name or made.name, made.format
    path = out or Path(f"{name}.zip")
    path.write_bytes(made.data)
    console.print(f"{path}: {made.summary}", markup=False, soft_wrap=True)
    if push:
        with client_for(url, token) as client:
            stored = call(client.upload_model, path, name=name, version=version, format=model_format)
        console.print(f"{stored.ref} sha256={stored.sha256} size={stored.size_bytes}")
