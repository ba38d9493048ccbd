//! Building a mount's tree from a probed source (mount time): the fixed directories, one
//! subtree instance per checkpoint's variables and per meta graph, `names/` symlinks, graph
//! links and rendered text files, and a SavedModel's assets (listed lazily). Serving the tree is
//! the dispatcher's job ([`super::Fs`]); a new view is one new subtree type plus one line here.

use crate::sync::write_lock;
use std::path::Path;
use std::sync::Arc;

use super::{Fs, Kind};
use crate::error::SourceError;
use crate::formats;
use crate::formats::names::LazyNames;
use crate::formats::tensors::{EmptySet, TensorSet};
use crate::formats::{names, Detected, OpenCtx, Opened};
use crate::fs::assets::Assets;
use crate::fs::fixed::{Fixed, FixedNodes};
use crate::fs::graph::{self, GraphTree};
use crate::fs::names::NamesTree;
use crate::fs::subtree::Subtree;
use crate::fs::text::{self, MetaGraphText, Part, WholeText};
use crate::fs::variables::{Variables, View};
use crate::fs::views;
use crate::graph::{GraphFile, GraphKind};
use crate::namespace::ino::{Ino, ROOT};
use crate::probe::{serving, Probed};
use crate::source::bytes::{FileMeta, Store};
use crate::source::dirtree;
use crate::source::dirtree::{PassTree, StoreTree, What};

fn meta_of(store: &dyn Store, path: &Path) -> Result<FileMeta, SourceError> {
    store.meta(path).map_err(|err| SourceError::Io {
        path: path.to_path_buf(),
        err,
    })
}

fn too_many(path: &Path) -> SourceError {
    SourceError::Invalid {
        path: path.to_path_buf(),
        msg: format!(
            "more than {} checkpoints and meta graphs in one mount",
            crate::namespace::ino::MAX_SUBTREES - 1
        ),
    }
}

/// The derived views of a checkpoint's tree, as `summary.txt` lists them: `text/`, `stats/`,
/// the two safetensors files, `names/` where it has names, and its format's own (`extra`:
/// `dequantized/`, `dequantized.safetensors`).
fn derived_views(has_names: bool, tensor_dirs: &[String]) -> Vec<String> {
    let mut v: Vec<String> = [
        "text/",
        "stats/",
        "model.safetensors",
        "weights.safetensors",
    ]
    .map(String::from)
    .into();
    if has_names {
        v.push("names/".into());
    }
    v.extend(tensor_dirs.iter().cloned());
    v
}

/// Builds one table of fixed nodes (and the subtrees linked into it) into an [`Fs`].
pub(super) struct Builder<'a> {
    fs: &'a Fs,
    store: &'a dyn Store,
    fixed: FixedNodes,
    /// The store as shared (for subtrees that read it after the build: assets).
    shared: Option<Arc<dyn Store>>,
    /// The registry slots this build took: its own table's first, then each subtree's (a live
    /// directory frees them all when the checkpoint is pruned and forgotten).
    pub(super) ids: Vec<u16>,
    /// The tensor sets this build added to the mount's checkpoints (a live directory takes
    /// them out again by identity: a checkpoint opened again has the same name).
    pub(super) sets: Vec<Arc<dyn TensorSet>>,
}

/// Builds the fixed tree of `probed` into `fs` (everything but a live directory).
pub(super) fn build_fixed(
    fs: &mut Fs,
    store: &Arc<dyn Store>,
    probed: &Probed,
) -> Result<(), SourceError> {
    let shared = store.clone();
    let store = &**store;
    let id = fs
        .registry
        .reserve()
        .ok_or_else(|| too_many(Path::new("/")))?;
    let mut b = Builder::new(fs, store, id);
    b.shared = Some(shared);
    b.build_root(probed)?;
    let fixed = b.finish();
    fs.registry.set(id, Arc::new(fixed));
    Ok(())
}

impl<'a> Builder<'a> {
    /// A builder of fixed-node table `id` (already reserved).
    pub(super) fn new(fs: &'a Fs, store: &'a dyn Store, id: u16) -> Builder<'a> {
        let mut fixed = FixedNodes::new(id);
        fixed.show_views = fs.opts.views_visible;
        Builder {
            fs,
            store,
            fixed,
            shared: fs.store.clone(),
            ids: vec![id],
            sets: Vec::new(),
        }
    }

    /// The finished table.
    pub(super) fn finish(self) -> FixedNodes {
        self.fixed
    }

    fn add(&mut self, f: Fixed) -> Ino {
        // A table holds at most 2^52 nodes: more would need more memory than any machine has.
        self.fixed.add(f).unwrap_or(Ino(0))
    }

    fn link(&mut self, dir: Ino, name: &[u8], child: Ino, kind: Kind) {
        self.fixed.link(dir, name, child, kind);
    }

    /// Links a derived view: reachable by path, listed only with `-o views=visible`
    /// ([`FixedNodes::link_view`]).
    fn link_view(&mut self, dir: Ino, name: &[u8], child: Ino, kind: Kind) {
        self.fixed.link_view(dir, name, child, kind);
    }

    /// A new fixed directory `name` in `parent`.
    fn add_dir(&mut self, parent: Ino, name: &[u8], meta: FileMeta) -> Ino {
        let d = self.add(Fixed::Dir {
            parent,
            children: Vec::new(),
            meta,
        });
        self.link(parent, name, d, Kind::Dir);
        d
    }

    /// Registers a subtree instance; `make` gets its id.
    fn register<S: Subtree + 'static>(
        &mut self,
        path: &Path,
        make: impl FnOnce(u16) -> S,
    ) -> Result<u16, SourceError> {
        let id = self.fs.registry.reserve().ok_or_else(|| too_many(path))?;
        self.fs.registry.set(id, Arc::new(make(id)));
        self.ids.push(id);
        Ok(id)
    }

    fn ctx(&self) -> OpenCtx<'_> {
        OpenCtx {
            store: self.store,
            shared: self.shared.clone(),
            caches: self.fs.caches.clone(),
            verify: self.fs.opts.verify_crc,
            crc_first: self.fs.opts.crc_first,
        }
    }

    /// The checkpoint at `path`, in whatever format it is.
    fn open_any(&self, path: &Path) -> Result<Arc<dyn Opened>, SourceError> {
        formats::open_path(&self.ctx(), path)
    }

    /// Node 1 of the table: the directory the mount root (or a live checkpoint's `<name>/`) is.
    fn add_root(&mut self, meta: FileMeta) -> Ino {
        self.add(Fixed::Dir {
            parent: ROOT,
            children: Vec::new(),
            meta,
        })
    }

    /// The mount root's table (node 1 is the root) for a probed source.
    fn build_root(&mut self, probed: &Probed) -> Result<(), SourceError> {
        match probed {
            Probed::Checkpoint(found) => {
                let ck = found.format.open(&self.ctx(), found)?;
                let root = self.add_root(ck.meta());
                self.add_checkpoint(root, String::new(), ck, &found.path)
            }
            Probed::Graph { path, kind } => {
                let g = GraphFile::open(self.store, path, *kind)?;
                let root = self.add_root(g.meta);
                self.add_graph(root, Arc::new(g))
            }
            Probed::CheckpointDir {
                dir,
                checkpoints,
                latest,
            } => self.build_checkpoint_dir(dir, checkpoints, latest.as_deref()),
            Probed::SavedModel { dir, variables } => {
                let root = self.add_root(meta_of(self.store, dir)?);
                self.add_saved_model(root, String::new(), dir, variables.as_deref(), true)
            }
        }
    }

    /// The root of a directory of checkpoints (not followed live): `<name>/` for each (a TF
    /// Serving base directory's versions: the SavedModel's tree), and the `latest` symlink to
    /// the current one.
    fn build_checkpoint_dir(
        &mut self,
        dir: &Path,
        checkpoints: &[(String, std::path::PathBuf)],
        latest: Option<&str>,
    ) -> Result<(), SourceError> {
        let meta = meta_of(self.store, dir)?;
        let root = self.add_root(meta);
        for (name, prefix) in checkpoints {
            if let Some(version) = serving::version_dir(prefix) {
                let d = self.add_dir(root, name.as_bytes(), meta_of(self.store, version)?);
                self.add_version(d, name, version)?;
                continue;
            }
            let ck = self.open_any(prefix)?;
            let d = self.add_dir(root, name.as_bytes(), ck.meta());
            self.add_checkpoint(d, name.clone(), ck, prefix)?;
        }
        if let Some(latest) = latest {
            let l = self.add(Fixed::Symlink {
                parent: root,
                target: latest.as_bytes().to_vec(),
                meta,
            });
            self.link(root, b"latest", l, Kind::Symlink);
        }
        Ok(())
    }

    /// Version `name` of a TF Serving base directory (the SavedModel directory `dir`) under
    /// `root`, as a SavedModel mounted alone shows it. One without `variables/variables.index`
    /// gets an empty `variables/` that is not [`TensorSet::complete`]: a live directory waits
    /// for the index while `variables/` grows (as for a checkpoint's data shards), and shows
    /// the version as it is after its files stop growing.
    fn add_version(&mut self, root: Ino, name: &str, dir: &Path) -> Result<(), SourceError> {
        let prefix = dir.join("variables").join("variables");
        let variables = self
            .store
            .is_file(&crate::formats::v2::checkpoint::index_file_name(&prefix))
            .then_some(prefix);
        self.add_saved_model(root, name.to_string(), dir, variables.as_deref(), false)
    }

    /// A SavedModel directory's tree under `root`: its variables (an empty `variables/` when it
    /// has none), its graph and its assets; `name` is its tree's path in the mount (empty at
    /// the root, a version's number in a TF Serving base directory); `alone`: without variables
    /// it is known to have none (false: see [`Builder::add_version`]).
    fn add_saved_model(
        &mut self,
        root: Ino,
        name: String,
        dir: &Path,
        variables: Option<&Path>,
        alone: bool,
    ) -> Result<(), SourceError> {
        let meta = meta_of(self.store, dir)?;
        let pb = dir.join("saved_model.pb");
        let graph = if self.store.is_file(&pb) {
            pb
        } else {
            dir.join("saved_model.pbtxt")
        };
        let g = Arc::new(GraphFile::open(self.store, &graph, GraphKind::SavedModel)?);
        match variables {
            Some(prefix) => self.add_saved_model_variables(root, name, prefix, &g)?,
            None => {
                let path = dir.join("variables/variables");
                // What `variables/` holds so far (a version still being written).
                let bytes = match alone {
                    true => 0,
                    false => self
                        .store
                        .list(&dir.join("variables"))
                        .unwrap_or_default()
                        .iter()
                        .filter_map(|(n, _)| self.store.stamp(&dir.join("variables").join(n)).ok())
                        .map(|(len, _)| len)
                        .sum(),
                };
                let set = Arc::new(EmptySet {
                    path: path.clone(),
                    meta,
                    complete: alone,
                    bytes,
                });
                self.add_variables(
                    root,
                    name,
                    set,
                    &path,
                    Arc::new(LazyNames::ready(Vec::new())),
                    derived_views(false, &[]),
                )?;
            }
        }
        self.add_graph(root, g)?;
        self.add_assets(root, dir)
    }

    /// A SavedModel's V2 checkpoint `prefix` under `root`: `variables/` and the views, and
    /// `names/` named by the object graph of `g`.
    fn add_saved_model_variables(
        &mut self,
        root: Ino,
        name: String,
        prefix: &Path,
        g: &Arc<GraphFile>,
    ) -> Result<(), SourceError> {
        let found = Detected {
            path: prefix.to_path_buf(),
            files: Vec::new(),
            format: &formats::v2::V2,
        };
        let ck = found.format.open(&self.ctx(), &found)?;
        // names/ and weights.safetensors name the variables alike, by names made
        // when first used.
        let has_names = ck.has_names();
        let pairs = Arc::new(if has_names {
            let (ck, g) = (ck.clone(), g.clone());
            LazyNames::new(move || saved_model_names(&*ck, &g))
        } else {
            LazyNames::ready(Vec::new())
        });
        let set = ck.tensors();
        self.add_variables(
            root,
            name,
            set.clone(),
            prefix,
            pairs.clone(),
            derived_views(has_names, &[]),
        )?;
        if has_names {
            self.add_names(root, set, pairs)?;
        }
        Ok(())
    }

    /// One checkpoint (or TF Serving version) of a live directory: its own table, whose node 1
    /// is `<name>/`.
    pub(super) fn build_checkpoint(
        &mut self,
        name: &str,
        prefix: &Path,
    ) -> Result<(), SourceError> {
        if let Some(version) = serving::version_dir(prefix) {
            let root = self.add_root(meta_of(self.store, version)?);
            return self.add_version(root, name, version);
        }
        let ck = self.open_any(prefix)?;
        let root = self.add_root(ck.meta());
        self.add_checkpoint(root, name.to_string(), ck, prefix)
    }

    /// A checkpoint's tree under `dir`: `variables/` and the views, `names/`, the format's own
    /// files, and a graph that goes with it.
    fn add_checkpoint(
        &mut self,
        dir: Ino,
        name: String,
        ck: Arc<dyn Opened>,
        path: &Path,
    ) -> Result<(), SourceError> {
        let set = self.editable(&ck, path)?;
        // names/ and weights.safetensors name the tensors alike (the format's readable names),
        // made when first used: never at mount.
        let has_names = ck.has_names();
        let pairs = Arc::new(if has_names {
            let ck = ck.clone();
            LazyNames::new(move || ck.names().into())
        } else {
            LazyNames::ready(Vec::new())
        });
        let tree_name = name.clone();
        let mut dirs: Vec<String> = ck
            .tensor_dirs()
            .into_iter()
            .map(|(p, _)| format!("{p}/"))
            .collect();
        dirs.extend(ck.safetensors_views().into_iter().map(|(p, _)| p));
        let views = derived_views(has_names, &dirs);
        self.add_variables(dir, name, set.clone(), path, pairs.clone(), views)?;
        if has_names {
            self.add_names(dir, set.clone(), pairs)?;
        }
        let meta = ck.meta();
        for (path, bytes) in ck.files() {
            let (parent, name) = self.parent_of(dir, &path, meta);
            let f = self.add(Fixed::Text {
                parent,
                text: Arc::new(crate::fs::fixed::Known(bytes)),
                meta,
            });
            self.link(parent, name.as_bytes(), f, Kind::File);
        }
        for (path, tensors) in ck.tensor_dirs() {
            let (parent, name) = self.parent_of(dir, &path, meta);
            let (s, texts) = (tensors.clone(), self.fs.texts.clone());
            let reuse = self.fs.opts.cache_bytes > 0;
            let id = self.register(tensors.path(), |id| {
                Variables::new(id, parent, s, texts, reuse)
            })?;
            let root = Ino::new(id, Variables::view_root(View::Variables))
                .ok_or_else(|| too_many(tensors.path()))?;
            // Tensors derived from the checkpoint's own (TFLite's `dequantized/`).
            self.link_view(parent, name.as_bytes(), root, Kind::Dir);
        }
        for (path, tensors) in ck.safetensors_views() {
            let (parent, name) = self.parent_of(dir, &path, meta);
            let f = self.add(Fixed::Text {
                parent,
                text: views::safetensors_of(tensors),
                meta,
            });
            self.link_view(parent, name.as_bytes(), f, Kind::File);
        }
        for (path, child) in ck.children() {
            let (parent, name) = self.parent_of(dir, &path, meta);
            let d = self.add_dir(parent, name.as_bytes(), child.meta());
            let sub = if tree_name.is_empty() {
                path.clone()
            } else {
                format!("{tree_name}/{path}")
            };
            let at = child.tensors().path().to_path_buf();
            self.add_checkpoint(d, sub, child, &at)?;
        }
        if let Some((p, bytes)) = ck.graph_def() {
            let g = GraphFile::from_bytes(&p, meta, GraphKind::GraphDef, bytes)?;
            self.add_graph(dir, Arc::new(g))?;
        }
        match ck.meta_graph() {
            Some(p) if self.store.is_file(&p) => {
                let g = GraphFile::open(self.store, &p, GraphKind::MetaGraph)?;
                self.add_graph(dir, Arc::new(g))
            }
            _ => Ok(()),
        }
    }

    /// The directory a `/`-separated `path` under `dir` goes in (made as needed) and its last
    /// component.
    fn parent_of<'p>(&mut self, dir: Ino, path: &'p str, meta: FileMeta) -> (Ino, &'p str) {
        let mut parent = dir;
        let mut parts: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
        let last = parts.pop().unwrap_or("");
        for c in parts {
            let found = self
                .fixed
                .children(parent)
                .into_iter()
                .find(|(n, _, k)| n == c.as_bytes() && *k == Kind::Dir)
                .map(|(_, ino, _)| ino);
            parent = match found {
                Some(ino) => ino,
                None => self.add_dir(parent, c.as_bytes(), meta),
            };
        }
        (parent, last)
    }

    /// `variables/`, `text/`, `stats/` and the root files; `names` are the `names/` pairs, which
    /// `weights.safetensors` names the weights by.
    fn add_variables(
        &mut self,
        dir: Ino,
        name: String,
        set: Arc<dyn TensorSet>,
        path: &Path,
        names: Arc<LazyNames>,
        views: Vec<String>,
    ) -> Result<(), SourceError> {
        let (s, texts) = (set.clone(), self.fs.texts.clone());
        let reuse = self.fs.opts.cache_bytes > 0;
        let id = self.register(path, |id| Variables::new(id, dir, s, texts, reuse))?;
        for view in [View::Variables, View::Text, View::Stats] {
            let root = Ino::new(id, Variables::view_root(view)).ok_or_else(|| too_many(path))?;
            match view {
                View::Variables => self.link(dir, view.name(), root, Kind::Dir),
                View::Text | View::Stats => self.link_view(dir, view.name(), root, Kind::Dir),
            }
        }
        let cache = self.store.cache_words();
        let editing = self.fs.edit.get().map(|e| e.edited.clone());
        if editing.is_some() {
            if let Some(root) = Ino::new(id, Variables::view_root(View::Variables)) {
                let _ = self.fs.edit_root.set(root.0);
            }
        }
        let files = views::root_files(&set, names.clone(), views.clone(), cache.clone());
        for (i, (name, file, derived)) in files.into_iter().enumerate() {
            // Rendered from the set: made anew after each edit.
            let file = match &editing {
                Some(ed) => {
                    let (set, names, views, cache) =
                        (set.clone(), names.clone(), views.clone(), cache.clone());
                    let make = move || {
                        views::root_files(&set, names.clone(), views.clone(), cache.clone())
                            .swap_remove(i)
                            .1
                    };
                    Arc::new(crate::fs::edit::Versioned::new(ed.clone(), Box::new(make)))
                        as Arc<dyn crate::fs::fixed::Generated>
                }
                None => file,
            };
            let meta = set.meta();
            let f = self.add(Fixed::Text {
                parent: dir,
                text: file,
                meta,
            });
            if derived {
                self.link_view(dir, name, f, Kind::File);
            } else {
                self.link(dir, name, f, Kind::File);
            }
        }
        self.sets.push(set.clone());
        write_lock(&self.fs.checkpoints).push((name, set));
        Ok(())
    }

    /// `set`, or with `-o edit` its edits over it ([`crate::fs::edit`]): one checkpoint only.
    fn editable(
        &mut self,
        ck: &Arc<dyn Opened>,
        path: &Path,
    ) -> Result<Arc<dyn TensorSet>, SourceError> {
        let set = ck.tensors();
        let Some(dir) = self.fs.opts.edit.clone() else {
            return Ok(set);
        };
        // Renames its TF2 object graph cannot follow are refused at the rename.
        let graph = ck.object_graph();
        if self.fs.edit.get().is_some() {
            return Err(SourceError::Invalid {
                path: path.to_path_buf(),
                msg: "-o edit edits one checkpoint, and this source holds more (mount the one to edit: a checkpoint prefix, a SavedModel, a file)".into(),
            });
        }
        // The journal names its source as `commit` will open it, from any directory.
        let canonical = match (path.parent(), path.file_name()) {
            (Some(dir), Some(name)) if !self.store.is_remote() => {
                std::fs::canonicalize(if dir.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    dir
                })
                .map(|d| d.join(name))
                .unwrap_or_else(|_| path.to_path_buf())
            }
            _ => path.to_path_buf(),
        };
        let source = canonical.display().to_string();
        let read_only = self.fs.opts.edit_read_only;
        let e = crate::fs::edit::Editing::open(set, graph, &dir, &source, read_only).map_err(
            |msg| SourceError::Invalid {
                path: dir.clone(),
                msg,
            },
        )?;
        let edited: Arc<dyn TensorSet> = e.edited.clone();
        if !read_only {
            let _ = self.fs.edit.set(Arc::new(e));
        }
        Ok(edited)
    }

    /// `names/` under `parent`: one subtree, built when first used ([`NamesTree`]).
    fn add_names(
        &mut self,
        parent: Ino,
        set: Arc<dyn TensorSet>,
        pairs: Arc<LazyNames>,
    ) -> Result<(), SourceError> {
        let path = set.path().to_path_buf();
        let id = self.register(&path, |id| NamesTree::new(id, parent, set, pairs))?;
        let root = NamesTree::root(id).ok_or_else(|| too_many(&path))?;
        self.link_view(parent, b"names", root, Kind::Dir);
        Ok(())
    }

    /// A SavedModel's `assets/` and `assets.extra/`: one subtree each, listed when first used,
    /// confined to the SavedModel's directory `dir`. Either one that is a symlink leading out of
    /// the model is shown as that symlink.
    fn add_assets(&mut self, root: Ino, dir: &Path) -> Result<(), SourceError> {
        let io = |err| SourceError::Io {
            path: dir.to_path_buf(),
            err,
        };
        let tree = match (self.store.confined_tree(dir), &self.shared) {
            (Some(t), _) => t,
            (None, Some(store)) => {
                StoreTree::open(store.clone(), dir).map(|t| Arc::new(t) as Arc<dyn PassTree>)
            }
            (None, None) => return Ok(()),
        };
        let tree = match tree {
            Ok(t) => t,
            // Plain HTTP: the variables and graphs are served, the assets not.
            Err(err) if err.kind() == std::io::ErrorKind::Unsupported => {
                log::warn!(
                    "{}: the store cannot list directories: assets/ and assets.extra/ are not shown",
                    dir.display()
                );
                return Ok(());
            }
            Err(err) => return Err(io(err)),
        };
        for name in ["assets", "assets.extra"] {
            let entry = tree
                .entry(dirtree::ROOT, std::ffi::OsStr::new(name))
                .map_err(|err| SourceError::Io {
                    path: dir.join(name),
                    err,
                })?;
            let node = match entry.map(|e| e.what) {
                Some(What::Dir(n))
                | Some(What::Link {
                    to: Some((true, n)),
                    ..
                }) => n,
                Some(What::Link {
                    target,
                    meta,
                    to: None,
                }) => {
                    let l = self.add(Fixed::Symlink {
                        parent: root,
                        target,
                        meta,
                    });
                    self.link(root, name.as_bytes(), l, Kind::Symlink);
                    continue;
                }
                _ => continue,
            };
            let t = tree.clone();
            let id = self.register(&dir.join(name), |id| Assets::new(id, root, t, node))?;
            if let Some(r) = Assets::root(id) {
                self.link(root, name.as_bytes(), r, Kind::Dir);
            }
        }
        Ok(())
    }

    /// Adds `meta_graphs/` for `file` under the fixed directory `parent`, and symlinks in
    /// `parent` to the default meta graph's entries.
    fn add_graph(&mut self, parent: Ino, file: Arc<GraphFile>) -> Result<(), SourceError> {
        let meta = file.meta;
        let mgs = self.add_dir(parent, b"meta_graphs", meta);
        let mut dirs = Vec::new();
        for (i, name) in meta_graph_dir_names(&file).into_iter().enumerate() {
            let dir = self.add_meta_graph(mgs, &name, &file, i)?;
            dirs.push((dir, name, file.metas[i].tags.clone()));
        }
        let want_tags = self.fs.opts.tags.clone();
        let want_tags = want_tags
            .as_deref()
            .filter(|_| file.kind == GraphKind::SavedModel);
        match default_meta_graph(&dirs, want_tags) {
            Some((dir, name, _)) => self.link_default_meta_graph(parent, *dir, name, meta),
            None => {
                if let Some(want) = want_tags {
                    return Err(no_tag_set(&file, want, &dirs));
                }
            }
        }
        if file.kind == GraphKind::SavedModel {
            let t = self.add(Fixed::Text {
                parent,
                text: Arc::new(WholeText::new(file.clone(), self.fs.texts.clone())),
                meta,
            });
            self.link(parent, b"saved_model.pbtxt", t, Kind::File);
        }
        Ok(())
    }

    /// `meta_graphs/NAME/` of meta graph `i` of `file` in `mgs`: its node spaces (one subtree)
    /// and its parts' texts.
    fn add_meta_graph(
        &mut self,
        mgs: Ino,
        name: &[u8],
        file: &Arc<GraphFile>,
        i: usize,
    ) -> Result<Ino, SourceError> {
        let dir = self.add_dir(mgs, name, file.meta);
        let (f, texts) = (file.clone(), self.fs.texts.clone());
        let id = self.register(&file.path, |id| GraphTree::new(id, dir, f, i, texts))?;
        for (n, space) in graph_spaces(&file.metas[i]) {
            if let Some(r) = GraphTree::space_root(id, space) {
                self.link(dir, n, r, Kind::Dir);
            }
        }
        self.add_meta_graph_parts(dir, file, i);
        Ok(dir)
    }

    /// The rendered parts of meta graph `i` that it has, as text files in `dir`.
    fn add_meta_graph_parts(&mut self, dir: Ino, file: &Arc<GraphFile>, i: usize) {
        let m = &file.metas[i];
        let parts: [(&[u8], bool, Part); 4] = [
            (
                b"meta_info_def.pbtxt",
                !m.meta_info_def.is_empty(),
                Part::MetaInfo,
            ),
            (b"saver_def.pbtxt", !m.saver_def.is_empty(), Part::Saver),
            (
                b"object_graph.pbtxt",
                !m.object_graph_def.is_empty(),
                Part::ObjectGraph,
            ),
            (
                b"signatures.txt",
                file.kind != GraphKind::GraphDef,
                Part::Signatures,
            ),
        ];
        for (n, present, part) in parts {
            if present {
                let t = self.add(Fixed::Text {
                    parent: dir,
                    text: Arc::new(MetaGraphText {
                        file: file.clone(),
                        mg: i,
                        part,
                        texts: self.fs.texts.clone(),
                        id: text::text_id(),
                    }),
                    meta: file.meta,
                });
                self.link(dir, n, t, Kind::File);
            }
        }
    }

    /// Symlinks in `parent` to each entry of the default meta graph's directory `dir`
    /// (`meta_graphs/NAME/`).
    fn link_default_meta_graph(&mut self, parent: Ino, dir: Ino, name: &[u8], meta: FileMeta) {
        for (n, _, _) in self.fixed.children(dir) {
            let mut target = b"meta_graphs/".to_vec();
            target.extend_from_slice(name);
            target.push(b'/');
            target.extend_from_slice(&n);
            let l = self.add(Fixed::Symlink {
                parent,
                target,
                meta,
            });
            self.link(parent, &n, l, Kind::Symlink);
        }
    }
}

/// A meta graph's directory in `meta_graphs/`, its name and its tags.
type MetaGraphDir = (Ino, Vec<u8>, Vec<String>);

/// The names of `file`'s meta graphs' directories, in order: by their tags, a name given
/// before taking `~2`, `~3`, ...
fn meta_graph_dir_names(file: &GraphFile) -> Vec<Vec<u8>> {
    let mut names: Vec<Vec<u8>> = Vec::new();
    for m in &file.metas {
        let mut name = graph::meta_graph_dir_name(file.kind, &m.tags);
        if names.contains(&name) {
            let mut k = 2;
            while names.contains(&[name.as_slice(), format!("~{k}").as_bytes()].concat()) {
                k += 1;
            }
            name.extend_from_slice(format!("~{k}").as_bytes());
        }
        names.push(name);
    }
    names
}

/// The node spaces meta graph `m` has, by their directory names.
fn graph_spaces(m: &crate::graph::MetaGraph) -> Vec<(&'static [u8], u32)> {
    let mut spaces: Vec<(&[u8], u32)> = Vec::new();
    if !m.graph_def.is_empty() {
        spaces.extend([
            (&b"graph"[..], graph::SP_NODES),
            (b"functions", graph::SP_FUNCS),
            (b"constants", graph::SP_CONSTS),
        ]);
    }
    if !m.signatures.is_empty() {
        spaces.push((b"signatures", graph::SP_SIGS));
    }
    if !m.collections.is_empty() {
        spaces.push((b"collections", graph::SP_COLLS));
    }
    spaces
}

/// The default meta graph: the one with the tag set `want_tags` (--tags, for a SavedModel),
/// else the only one, else "serve", else the untagged one (what `hub.Module` loads from a TF Hub
/// TF1 module, whose meta graphs are tagged `{}` and `{"train"}`).
fn default_meta_graph<'d>(
    dirs: &'d [MetaGraphDir],
    want_tags: Option<&str>,
) -> Option<&'d MetaGraphDir> {
    if let Some(want) = want_tags {
        let mut want: Vec<&str> = want.split(',').filter(|t| !t.is_empty()).collect();
        want.sort_unstable();
        dirs.iter().find(|(_, _, tags)| {
            let mut t: Vec<&str> = tags.iter().map(|s| s.as_str()).collect();
            t.sort_unstable();
            t == want
        })
    } else if dirs.len() == 1 {
        dirs.first()
    } else {
        dirs.iter()
            .find(|(_, _, tags)| tags == &["serve"])
            .or_else(|| dirs.iter().find(|(_, _, tags)| tags.is_empty()))
    }
}

/// --tags named a tag set no meta graph of `file` has (refused, also when there is only one).
fn no_tag_set(file: &GraphFile, want: &str, dirs: &[MetaGraphDir]) -> SourceError {
    SourceError::Invalid {
        path: file.path.clone(),
        msg: format!(
            "no meta graph has the tag set {want:?} (it has: {})",
            dirs.iter()
                .map(|(_, n, _)| String::from_utf8_lossy(n).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        ),
    }
}

/// The `names/` pairs of the SavedModel in `dir` whose variables are `ck` (`tfmount diff
/// --names`): as [`saved_model_names`] makes them for the mount; none when its graph cannot be
/// read (logged).
pub(crate) fn saved_model_names_in(store: &dyn Store, dir: &Path, ck: &dyn Opened) -> names::Names {
    let pb = dir.join("saved_model.pb");
    let graph = if store.is_file(&pb) {
        pb
    } else {
        dir.join("saved_model.pbtxt")
    };
    match GraphFile::open(store, &graph, GraphKind::SavedModel) {
        Ok(g) => saved_model_names(ck, &g),
        Err(e) => {
            log::warn!("{e}");
            names::Names::default()
        }
    }
}

/// A SavedModel's `names/` pairs, which its `weights.safetensors` names weights by too: from
/// its object graph and the checkpoint's.
fn saved_model_names(ck: &dyn Opened, g: &GraphFile) -> names::Names {
    use prost::Message;
    let Some(tog) = ck.object_graph() else {
        return names::Names::default();
    };
    let buf = g.bytes();
    for m in &g.metas {
        if m.object_graph_def.is_empty() {
            continue;
        }
        let mut bytes = Vec::new();
        for f in &m.object_graph_def {
            bytes.extend_from_slice(buf.get(f.payload_range()).unwrap_or(&[]));
        }
        match crate::proto::SavedObjectGraph::decode(bytes.as_slice()) {
            Ok(sog) => {
                let set = ck.tensors();
                let same = |a: &str, b: &str| same_bytes(&*set, a, b);
                return names::saved_model_names(&sog, &tog, &same);
            }
            Err(e) => log::warn!("{}: object graph: {e}", g.path.display()),
        }
    }
    names::Names::default()
}

/// Whether the tensors under keys `a` and `b` hold the same bytes as far as the index says:
/// dtype, shape, length and a stored CRC-32C alike (a format that stores none: never).
fn same_bytes(set: &dyn TensorSet, a: &str, b: &str) -> bool {
    let info = |k: &str| {
        let p = set.seek(k.as_bytes()).ok()??;
        let i = set.info(p).ok()?;
        (i.key == k.as_bytes()).then_some(i)
    };
    match (info(a), info(b)) {
        (Some(x), Some(y)) => match (&x.stored, &y.stored) {
            (Some(sx), Some(sy)) => {
                x.dtype == y.dtype
                    && x.shape == y.shape
                    && sx.size == sy.size
                    && sx.crc32c.is_some()
                    && sx.crc32c == sy.crc32c
            }
            _ => false,
        },
        _ => false,
    }
}
