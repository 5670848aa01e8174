"""Model conversion on followers: PyTorch → ONNX / TorchScript, ONNX → Triton repository, Keras → SavedModel.

Every conversion is checked numerically against its source; the check and its tolerance are returned and recorded.
Conversions load and run model code, so they only ever happen on followers (or the user's machine), never on the leader.
"""
