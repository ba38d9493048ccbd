//! Text files rendered on demand from graph files: a meta graph's `meta_info_def.pbtxt`,
//! `saver_def.pbtxt`, `object_graph.pbtxt` and `signatures.txt`, and a SavedModel's whole
//! `saved_model.pbtxt` (rendered piece by piece). Rendered text is kept in the mount's one
//! bounded text cache.

use bytes::Bytes;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::cache::Lru;
use crate::error::{FsError, FsResult};
use crate::fs::fixed::Generated;
use crate::fs::subtree::slice_of;
use crate::graph::{GraphFile, MetaGraph};
use crate::parse::FormatError;
use crate::render;

/// Rendered text by `(text file, piece)`, bounded by bytes.
pub(crate) type Texts = Lru<(u64, u64), Arc<Vec<u8>>>;

static NEXT_TEXT: AtomicU64 = AtomicU64::new(1);

/// A fresh cache key for one text file.
pub(crate) fn text_id() -> u64 {
    NEXT_TEXT.fetch_add(1, Ordering::Relaxed)
}

/// `render()`'s text, from the cache or rendered now (and kept, if it fits).
pub(crate) fn cached(
    texts: &Texts,
    key: (u64, u64),
    render: impl FnOnce() -> Result<Vec<u8>, String>,
) -> Result<Arc<Vec<u8>>, String> {
    texts.get_or_insert_with(key, || {
        render().map(|t| {
            let w = t.len();
            (Arc::new(t), w)
        })
    })
}

/// A rendering failure of `what` in graph file `file`.
pub(crate) fn render_error(file: &GraphFile, what: &str, e: String) -> FsError {
    FsError::corrupt(what, file.path.display(), FormatError::Text(e))
}

/// Which part of a meta graph a text file shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    MetaInfo,
    Saver,
    ObjectGraph,
    Signatures,
}

/// One rendered part of a meta graph.
pub(crate) struct MetaGraphText {
    pub(crate) file: Arc<GraphFile>,
    pub(crate) mg: usize,
    pub(crate) part: Part,
    pub(crate) texts: Arc<Texts>,
    pub(crate) id: u64,
}

impl MetaGraphText {
    fn text(&self) -> FsResult<Arc<Vec<u8>>> {
        let buf = self.file.bytes();
        let parts = |f: fn(&MetaGraph) -> &Vec<crate::parse::wire::Field>| {
            self.file
                .metas
                .get(self.mg)
                .map(|m| f(m).iter().map(|x| x.payload_range()).collect::<Vec<_>>())
                .unwrap_or_default()
        };
        cached(&self.texts, (self.id, 0), || match self.part {
            Part::MetaInfo => render::message_text(
                "tensorflow.MetaGraphDef.MetaInfoDef",
                buf,
                &parts(|m| &m.meta_info_def),
            ),
            Part::Saver => {
                render::message_text("tensorflow.SaverDef", buf, &parts(|m| &m.saver_def))
            }
            Part::ObjectGraph => render::message_text(
                "tensorflow.SavedObjectGraph",
                buf,
                &parts(|m| &m.object_graph_def),
            ),
            Part::Signatures => render::signatures_txt(&self.file, self.mg),
        })
        .map_err(|e| render_error(&self.file, "rendering", e))
    }
}

impl Generated for MetaGraphText {
    fn size(&self) -> FsResult<u64> {
        Ok(self.text()?.len() as u64)
    }

    fn read(&self, offset: u64, size: usize) -> FsResult<Bytes> {
        Ok(slice_of(&self.text()?, offset, size))
    }
}

/// A file rendered piece by piece: the pieces and the end offset of each.
struct Pieces {
    list: Vec<render::Piece>,
    ends: Vec<u64>,
}

/// `saved_model.pbtxt`: the whole SavedModel as text, rendered a node or function at a time.
/// Its size comes from one rendering pass (keeping only lengths) the first time it is asked
/// for; reads then render only the pieces they touch.
pub(crate) struct WholeText {
    pub(crate) file: Arc<GraphFile>,
    pub(crate) texts: Arc<Texts>,
    pub(crate) id: u64,
    pieces: OnceLock<Result<Pieces, String>>,
}

impl WholeText {
    pub(crate) fn new(file: Arc<GraphFile>, texts: Arc<Texts>) -> WholeText {
        WholeText {
            file,
            texts,
            id: text_id(),
            pieces: OnceLock::new(),
        }
    }

    fn pieces(&self) -> FsResult<&Pieces> {
        let r = self.pieces.get_or_init(|| {
            let buf = self.file.bytes();
            let list = render::saved_model_pieces(buf)?;
            let mut ends = Vec::with_capacity(list.len());
            let mut end = 0u64;
            for p in &list {
                end += render::render_piece(buf, p)?.len() as u64;
                ends.push(end);
            }
            Ok(Pieces { list, ends })
        });
        r.as_ref()
            .map_err(|e| render_error(&self.file, "rendering", e.clone()))
    }
}

impl Generated for WholeText {
    fn size(&self) -> FsResult<u64> {
        Ok(self.pieces()?.ends.last().copied().unwrap_or(0))
    }

    fn read(&self, offset: u64, size: usize) -> FsResult<Bytes> {
        let pieces = self.pieces()?;
        let mut out = Vec::with_capacity(size.min(1 << 20));
        let mut i = pieces.ends.partition_point(|&e| e <= offset);
        while out.len() < size && i < pieces.list.len() {
            let start = if i == 0 { 0 } else { pieces.ends[i - 1] };
            let text = cached(&self.texts, (self.id, i as u64 + 1), || {
                render::render_piece(self.file.bytes(), &pieces.list[i])
            })
            .map_err(|e| render_error(&self.file, "rendering", e))?;
            let from = (offset + out.len() as u64).saturating_sub(start) as usize;
            let from = from.min(text.len());
            let take = (size - out.len()).min(text.len() - from);
            out.extend_from_slice(&text[from..from + take]);
            i += 1;
        }
        Ok(out.into())
    }
}
