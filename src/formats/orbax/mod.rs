//! Orbax checkpoints (JAX, Keras 3's `OrbaxCheckpoint`): in progress (issue 28). So far the
//! OCDBT key-value store Orbax writes its arrays into ([`ocdbt`]) and the zarr arrays in it
//! ([`zarr`]: metadata, chunks decoded, a byte range assembled from the chunks it covers), read
//! and tested against the fixtures Orbax wrote; the `Format` over them (`_METADATA` names, the
//! checkpoint and step directories) is not written yet, so this folder has no row in `FORMATS`.

// Used by their tests and the fuzz target until the format is written.
#[allow(dead_code)]
pub(crate) mod ocdbt;
#[allow(dead_code)]
pub(crate) mod zarr;
