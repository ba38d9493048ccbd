//! Orbax checkpoints (JAX, Keras 3's `OrbaxCheckpoint`): in progress (issue 28). So far the
//! OCDBT key-value store Orbax writes its arrays into ([`ocdbt`]), read and tested against the
//! fixtures Orbax wrote, and fuzzed; the `Format` over it (zarr arrays, `_METADATA` names) is
//! not written yet, so this folder has no row in `FORMATS`.

// Used by its tests and the fuzz target until the format is written.
#[allow(dead_code)]
pub(crate) mod ocdbt;
