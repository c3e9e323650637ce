//! Scenario 7, workspace upload (`baton-bench upload`): what `baton submit --workspace-from DIR`
//! costs. A generated tree (deterministic pseudo-random content, sizes spread log-uniformly
//! over four decades, scaled to the total: 11 bytes to 94 KiB for the default tree) is uploaded to a fresh local blob store, then
//! uploaded again with its largest file changed (only that blob is sent), then once more unchanged
//! (the floor: walk, hash, `contains` checks, the manifest). Then [`first_call`] submits the
//! same tree with the real CLI to a dev server and a worker: submit to the first model call,
//! cold and warm.

use std::{
    fs,
    path::Path,
    time::{Duration, Instant},
};

use anyhow::Context;

use crate::first_call::{self, FirstCallReport};
use baton_store::{
    LocalStore,
    snapshot::{UploadOptions, Uploaded, upload_dir},
};

const MIB: f64 = 1024.0 * 1024.0;
/// Files per directory of the generated tree.
const FILES_PER_DIR: usize = 100;
/// File sizes before scaling to the total.
const SMALLEST: f64 = 16.0;
const LARGEST: f64 = 128.0 * 1024.0;

/// What to measure.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    /// Files in the tree.
    pub(crate) files: usize,
    /// Bytes of all the files together.
    pub(crate) bytes: u64,
}

impl Settings {
    /// The upload benchmark's tree: 10,000 files, 100 MiB.
    pub(crate) const FULL: Self = Self {
        files: 10_000,
        bytes: 100 * 1024 * 1024,
    };
    /// The CI smoke size (enough files that the largest stays well under 1% of the total).
    pub(crate) const SHORT: Self = Self {
        files: 2_000,
        bytes: 10 * 1024 * 1024,
    };
}

/// One upload.
#[derive(Debug)]
pub(crate) struct Measure {
    pub(crate) uploaded: Uploaded,
    pub(crate) elapsed: Duration,
}

/// The result of the upload scenario.
#[derive(Debug)]
pub(crate) struct UploadReport {
    pub(crate) settings: Settings,
    pub(crate) generate: Duration,
    pub(crate) first: Measure,
    pub(crate) changed: Measure,
    pub(crate) unchanged: Measure,
    /// Submit to the first model call, cold and warm.
    pub(crate) first_call: FirstCallReport,
}

/// Generates the tree and uploads it three times into a fresh store, then measures submit to
/// the first model call with it.
pub(crate) async fn run(settings: Settings) -> anyhow::Result<UploadReport> {
    anyhow::ensure!(settings.files >= 1, "files must be at least 1");
    let base = tempfile::tempdir().context("temporary directory")?;
    let tree = base.path().join("tree");
    eprintln!(
        "upload: generating {} files, {:.0} MiB",
        settings.files,
        settings.bytes as f64 / MIB
    );
    let started = Instant::now();
    let sizes = generate(&tree, settings)?;
    let generate = started.elapsed();
    let store = LocalStore::new(base.path().join("store"))?;
    let options = UploadOptions {
        max_total_bytes: settings.bytes.max(UploadOptions::default().max_total_bytes),
    };

    let first = measure(&store, &tree, &options).await?;
    anyhow::ensure!(
        first.uploaded.files == settings.files && first.uploaded.total_bytes == settings.bytes,
        "the upload holds {} files, {} bytes; generated {}, {}",
        first.uploaded.files,
        first.uploaded.total_bytes,
        settings.files,
        settings.bytes
    );

    // Change the largest file (the worst case for one file), keeping its size.
    let index = (0..sizes.len()).max_by_key(|&i| sizes[i]).unwrap_or(0);
    let path = tree.join(file_path(index));
    fs::write(&path, content(u64::MAX - index as u64, sizes[index]))
        .with_context(|| format!("rewrite {}", path.display()))?;
    let changed = measure(&store, &tree, &options).await?;
    anyhow::ensure!(
        changed.uploaded.uploaded == 1,
        "one file changed, {} blobs sent",
        changed.uploaded.uploaded
    );
    let ratio = changed.uploaded.uploaded_bytes as f64 / first.uploaded.uploaded_bytes as f64;
    anyhow::ensure!(
        ratio < 0.01,
        "the second upload sent {:.2}% of the first",
        ratio * 100.0
    );

    let unchanged = measure(&store, &tree, &options).await?;
    anyhow::ensure!(
        unchanged.uploaded.uploaded == 0 && unchanged.uploaded.id == changed.uploaded.id,
        "an unchanged tree sent {} blobs",
        unchanged.uploaded.uploaded
    );
    let first_call = first_call::run(&tree, settings.files, settings.bytes).await?;
    Ok(UploadReport {
        settings,
        generate,
        first,
        changed,
        unchanged,
        first_call,
    })
}

async fn measure(
    store: &LocalStore,
    tree: &Path,
    options: &UploadOptions,
) -> anyhow::Result<Measure> {
    let started = Instant::now();
    let uploaded = upload_dir(store, tree, options).await?;
    Ok(Measure {
        uploaded,
        elapsed: started.elapsed(),
    })
}

/// splitmix64: a deterministic, seedable stream of pseudo-random numbers.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn file_path(index: usize) -> String {
    let dir = index / FILES_PER_DIR;
    format!("d{:02}/d{:02}/f{index:05}.bin", dir / 10, dir % 10)
}

/// `size` pseudo-random bytes from `seed`.
fn content(seed: u64, size: u64) -> Vec<u8> {
    let mut rng = SplitMix(seed);
    let mut bytes = Vec::with_capacity(size as usize + 8);
    while (bytes.len() as u64) < size {
        bytes.extend_from_slice(&rng.next().to_le_bytes());
    }
    bytes.truncate(size as usize);
    bytes
}

/// Writes the tree and returns each file's size.
fn generate(root: &Path, settings: Settings) -> anyhow::Result<Vec<u64>> {
    let mut rng = SplitMix(15);
    let (low, high) = (SMALLEST.ln(), LARGEST.ln());
    let weights: Vec<f64> = (0..settings.files)
        .map(|_| (low + rng.unit() * (high - low)).exp())
        .collect();
    let scale = settings.bytes as f64 / weights.iter().sum::<f64>();
    let mut sizes: Vec<u64> = weights.iter().map(|w| (w * scale) as u64).collect();
    let short = settings.bytes.saturating_sub(sizes.iter().sum::<u64>());
    if let Some(last) = sizes.last_mut() {
        *last += short;
    }
    for (index, size) in sizes.iter().enumerate() {
        let path = root.join(file_path(index));
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).with_context(|| format!("create {}", parent.display()))?;
        }
        fs::write(&path, content(index as u64, *size))
            .with_context(|| format!("write {}", path.display()))?;
    }
    Ok(sizes)
}

impl UploadReport {
    /// The scenario's table.
    pub(crate) fn render(&self) -> String {
        let row = |label: &str, m: &Measure| {
            format!(
                "| {label} | {} | {:.2} | {} | {} | {:.3} |\n",
                m.uploaded.files,
                m.uploaded.total_bytes as f64 / MIB,
                m.uploaded.uploaded,
                m.uploaded.uploaded_bytes,
                m.elapsed.as_secs_f64()
            )
        };
        let ratio =
            self.changed.uploaded.uploaded_bytes as f64 / self.first.uploaded.uploaded_bytes as f64;
        format!(
            "### Workspace upload ({} files, {:.0} MiB, local store; tree written in {:.1} s)\n\n\
             | upload | files | MiB in tree | blobs sent | bytes sent | seconds |\n\
             |---|--:|--:|--:|--:|--:|\n{}{}{}\n\
             Second upload / first, bytes sent: {:.4}% (must be under 1%).\n\n{}",
            self.settings.files,
            self.settings.bytes as f64 / MIB,
            self.generate.as_secs_f64(),
            row("first, empty store", &self.first),
            row("largest file changed", &self.changed),
            row("unchanged", &self.unchanged),
            ratio * 100.0,
            self.first_call.render()
        )
    }
}
