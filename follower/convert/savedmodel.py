"""Keras / TensorFlow → SavedModel (what TF Serving serves), checked numerically against the source model.

TensorFlow is an optional extra (`tensorflow-serving-api` pulls it in); without it conversion raises a clear error.
The SavedModel is zipped in the layout follower.backends.tfserving unpacks (saved_model.pb + variables/ at the root).
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from follower.convert.check import ConversionCheck, compare, require


def tensorflow_available() -> tuple[bool, str]:
    """Whether TensorFlow can be imported here, and why not."""
    import importlib.util

    if importlib.util.find_spec("tensorflow") is None:
        return False, "TensorFlow is not installed (pip install 'benchfleet[tfserving]' pulls it in)"
    return True, "tensorflow importable"


def _tf() -> Any:
    ok, why = tensorflow_available()
    if not ok:
        raise RuntimeError(f"Keras/TF → SavedModel conversion needs TensorFlow: {why}")
    import tensorflow as tf

    return tf


def keras_to_savedmodel(source: Path | Any, out_dir: Path, example: np.ndarray) -> ConversionCheck:
    """Export a Keras model (a .keras/.h5 path or a model object) as a SavedModel at out_dir; check it on `example`."""
    tf = _tf()
    model = tf.keras.models.load_model(str(source)) if isinstance(source, str | Path) else source
    expected = np.asarray(model(example, training=False))
    out_dir = Path(out_dir)
    if hasattr(model, "export"):  # Keras 3: the serving export (a `serve` / serving_default endpoint)
        model.export(str(out_dir))
    else:
        tf.saved_model.save(model, str(out_dir))
    loaded = tf.saved_model.load(str(out_dir))
    serve = loaded.signatures["serving_default"]
    outputs = serve(tf.constant(example))
    actual = [np.asarray(v) for v in outputs.values()]
    return require(compare("savedmodel", [expected], actual[:1], samples=int(example.shape[0])))


def zip_savedmodel(saved_dir: Path) -> bytes:
    """The SavedModel directory as the zip TF Serving's backend unpacks (format `savedmodel`)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(Path(saved_dir).rglob("*")):
            if path.is_file():
                zf.write(path, path.relative_to(saved_dir).as_posix())
    return buf.getvalue()
