"""Bytes ⇄ values, no I/O: the wire format of chunk data, tensors, signatures and nests.

* :mod:`reverb_py._codec.fields`: reading protobuf wire fields (a leaf module);
* :mod:`reverb_py._codec.tensor`: numpy arrays ⇄ ``TensorProto``, delta encoding;
* :mod:`reverb_py._codec.chunk`: ``ChunkData`` encoding and decoding, the chunk cache,
  trajectory unpacking;
* :mod:`reverb_py._codec.signature`: table signatures ⇄ ``StructuredValue``;
* :mod:`reverb_py._codec.dtypes`: numpy dtypes ⇄ TensorFlow ``DataType`` numbers;
* :mod:`reverb_py._codec.nest`: nested structures (``tree``'s rules).

Callers import the submodule they need; this file holds nothing else.
"""
