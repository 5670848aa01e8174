"""A stand-in for a tensorflow_model_server's REST API (no TF Serving binary can be installed here), for one model
computed by ONNX Runtime from an ONNX file, answering as TF Serving's published REST API does
(https://www.tensorflow.org/tfx/serving/api_rest) and strict where it is:

- model status at /v1/models/NAME[/versions/V | /labels/L] (`model_version_status` with the version, its state
  AVAILABLE and status OK), metadata at .../metadata (`signature_def` of serving_default, int64 sizes as strings, as
  TF Serving's JSON writes them), and POST .../:predict;
- a predict body holds exactly one of `instances` (the row format: one entry per example, an object per example when
  the signature has several inputs) or `inputs` (the columnar format: the batch per input), and may name
  `signature_name`; it is answered with `predictions` (rows) or `outputs` (columns) in the same format;
- an unknown model, version or label is 404 and a signature other than serving_default, a missing or extra input, a
  wrong rank or size, a value of the wrong type or both or neither format key are 400, each with TF Serving's
  `{"error": "..."}` body; with a key file, a request without the `X-Api-Key` header holding the key is 401.

Counts of what it answered (by format and status) are at GET /counts.

    python -m tests.e2e.tfserving_rest_standin --port P --model FILE.onnx --name NAME --version 3 [--label stable]
        [--key-file FILE]
"""

from __future__ import annotations

import argparse
import collections
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from aiohttp import web

from common.formats.datatypes import ORT_TO_V2, V2_TO_NUMPY, V2_TO_TF

DEFAULT_SIGNATURE = "serving_default"
_PATH = re.compile(r"^/v1/models/(?P<name>[^/:]+)(?:/versions/(?P<version>[^/:]+)|/labels/(?P<label>[^/:]+))?(?P<rest>.*)$")


class Refused(Exception):
    def __init__(self, status: int, error: str) -> None:
        super().__init__(error)
        self.status, self.error = status, error


class RestStandIn:
    """The model's one version behind TF Serving's REST API."""

    def __init__(self, model: Path, name: str, version: int, label: str | None, key: str | None) -> None:
        self.session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
        self.name, self.version, self.label, self.key = name, version, label, key
        self.inputs = {i.name: (ORT_TO_V2[i.type], i.shape) for i in self.session.get_inputs()}
        self.outputs = {o.name: ORT_TO_V2[o.type] for o in self.session.get_outputs()}
        self.counts: collections.Counter[str] = collections.Counter()

    def _resolve(self, request: web.Request) -> str:
        """The path's rest (after the model's part) once the model, version or label and the key check out."""
        if self.key is not None and request.headers.get("X-Api-Key") != self.key:
            raise Refused(401, "missing or wrong API key")
        match = _PATH.match(request.path)
        if match is None:
            raise Refused(404, f"Malformed request: {request.method} {request.path}")
        name, version, label = match["name"], match["version"], match["label"]
        if name != self.name:
            raise Refused(404, f"Servable not found for request: Latest({name})")
        if version is not None and version != str(self.version):
            raise Refused(404, f"Servable not found for request: Specific({name}, {version})")
        if label is not None and label != self.label:
            raise Refused(400, f"Unrecognized servable version label: {label}")
        return match["rest"]

    def _shape(self, shape: list[Any]) -> dict[str, Any]:
        dims = [{"size": str(d if isinstance(d, int) else -1), "name": ""} for d in shape]
        return {"dim": dims, "unknown_rank": False}

    def status(self) -> dict[str, Any]:
        state = {"version": str(self.version), "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}
        return {"model_version_status": [state]}

    def metadata(self) -> dict[str, Any]:
        inputs = {
            name: {"dtype": V2_TO_TF[datatype], "tensor_shape": self._shape(shape), "name": f"{name}:0"}
            for name, (datatype, shape) in self.inputs.items()
        }
        outputs = {
            name: {"dtype": V2_TO_TF[datatype], "tensor_shape": {"dim": [], "unknown_rank": True}, "name": f"{name}:0"}
            for name, datatype in self.outputs.items()
        }
        signature = {"inputs": inputs, "outputs": outputs, "method_name": "tensorflow/serving/predict"}
        return {
            "model_spec": {"name": self.name, "signature_name": "", "version": str(self.version)},
            "metadata": {"signature_def": {"signature_def": {DEFAULT_SIGNATURE: signature}}},
        }

    def _tensor(self, name: str, value: Any) -> np.ndarray:
        datatype, shape = self.inputs[name]
        try:
            array = np.asarray(value, dtype=V2_TO_NUMPY[datatype])
        except (TypeError, ValueError):
            raise Refused(400, f"Failed to process element: 0 key: {name} of 'instances' list. Error: bad value") from None
        if array.dtype == object or array.ndim != len(shape):
            raise Refused(400, f"input {name}: rank {array.ndim}, the signature's is {len(shape)}")
        wrong = [d for d, s in zip(array.shape[1:], shape[1:], strict=True) if isinstance(s, int) and s >= 0 and d != s]
        if wrong:
            raise Refused(400, f"input {name}: shape {list(array.shape)} does not match the signature's {shape}")
        return array

    def predict(self, body: Any) -> tuple[str, dict[str, Any]]:
        if not isinstance(body, dict):
            raise Refused(400, "JSON Value: not an object")
        signature = body.get("signature_name", DEFAULT_SIGNATURE)
        if signature != DEFAULT_SIGNATURE:
            raise Refused(400, f'Serving signature name: "{signature}" not found in signature def')
        if ("instances" in body) == ("inputs" in body):
            raise Refused(400, "Missing 'inputs' or 'instances' key" if "inputs" not in body else "both 'inputs' and 'instances'")
        names = list(self.inputs)
        if "instances" in body:
            rows = body["instances"]
            if not isinstance(rows, list) or not rows:
                raise Refused(400, "'instances' must be a non-empty list")
            if len(names) == 1:
                columns = {names[0]: [r[names[0]] if isinstance(r, dict) else r for r in rows]}
            elif all(isinstance(r, dict) and set(r) == set(names) for r in rows):
                columns = {n: [r[n] for r in rows] for n in names}
            else:
                raise Refused(400, f"every instance must be an object with the inputs {names}")
            kind = "row"
        else:
            given = body["inputs"]
            columns = given if isinstance(given, dict) else ({names[0]: given} if len(names) == 1 else {})
            if set(columns) != set(names):
                raise Refused(400, f"inputs {sorted(columns)}, expected {sorted(names)}")
            kind = "columnar"
        feed = {name: self._tensor(name, value) for name, value in columns.items()}
        results = dict(zip(self.outputs, self.session.run(None, feed), strict=True))
        if kind == "row":
            if len(results) == 1:
                return kind, {"predictions": next(iter(results.values())).tolist()}
            n = len(next(iter(results.values())))
            return kind, {"predictions": [{k: v[i].tolist() for k, v in results.items()} for i in range(n)]}
        if len(results) == 1:
            return kind, {"outputs": next(iter(results.values())).tolist()}
        return kind, {"outputs": {k: v.tolist() for k, v in results.items()}}

    async def handle(self, request: web.Request) -> web.Response:
        if request.path == "/counts":
            return web.json_response(dict(self.counts))
        try:
            rest = self._resolve(request)
            if request.method == "GET" and rest == "":
                answer, kind = self.status(), "status"
            elif request.method == "GET" and rest == "/metadata":
                answer, kind = self.metadata(), "metadata"
            elif request.method == "POST" and rest == ":predict":
                try:
                    body = json.loads(await request.read())
                except ValueError as exc:
                    raise Refused(400, f"JSON Parse error: {exc}") from None
                kind, answer = self.predict(body)
            else:
                raise Refused(404, f"Malformed request: {request.method} {request.path}")
        except Refused as refused:
            self.counts[f"refused {refused.status}"] += 1
            return web.json_response({"error": refused.error}, status=refused.status)
        self.counts[kind] += 1
        return web.json_response(answer)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--version", type=int, default=1)
    parser.add_argument("--label")
    parser.add_argument("--key-file", type=Path)  # not argv: a key in argv shows in `ps`
    args = parser.parse_args()
    key = args.key_file.read_text().strip() if args.key_file else None
    standin = RestStandIn(args.model, args.name, args.version, args.label, key)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", standin.handle)
    web.run_app(app, host="127.0.0.1", port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
