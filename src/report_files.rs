//! The hammer's report files (`--export-json`, `--export-markdown`, `--export-html`,
//! `--metrics-file`): opened before the run (so a bad path fails before any purchase) and
//! written after it, in place. A file that was there is not truncated until the report is
//! whole, so a run that ends without a report leaves it as it was (same inode, owner, mode
//! and links); a file the run created is removed. A device, a pipe or a stream path
//! (`/dev/null`, `>(jq .)`, `/dev/stdout`) is appended to, never truncated or removed. `-`
//! means stdout, which then carries only that export. `--history` is one of them: the run's
//! every request as JSON Lines.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::cli::HammerArgs;
use crate::usage::UsageError;
use lockctl_hammer::Report;
use lockctl_hammer::history::History;
use lockctl_render::{self as render, Context, HammerDocument};

#[derive(Clone, Copy)]
enum Kind {
    Json,
    Markdown,
    Html,
    Metrics,
    History,
}

struct Export {
    kind: Kind,
    /// `None` for stdout.
    target: Option<Target>,
}

/// Where an export goes.
struct Target {
    /// The path as given.
    path: PathBuf,
    file: File,
    /// How it is written.
    how: How,
}

enum How {
    /// A regular file that was there: kept as it is (contents, inode, owner, mode, links)
    /// until the report is whole, then truncated and written in place.
    Replace,
    /// A regular file this run created (empty, exclusively), at this resolved path: removed
    /// if the run fails.
    Created(PathBuf),
    /// A device, a pipe or a stream (`/dev/null`, `>(jq .)`, `/dev/stdout`): appended to,
    /// never truncated or removed.
    Stream,
}

/// Files this process created for exports and has not yet written: removed if it quits at
/// once (a second Ctrl-C), as when a run fails.
static CREATED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Removes the export files this process created and had not yet written; for a process that
/// is quitting now.
pub fn abandon_created() {
    let created = CREATED.lock().map(|c| c.clone()).unwrap_or_default();
    for p in created {
        let _ = std::fs::remove_file(p);
    }
}

/// Takes `path` off [`CREATED`]; whether it was there.
fn settle(path: &Path) -> bool {
    CREATED.lock().is_ok_and(|mut c| {
        let before = c.len();
        c.retain(|p| p != path);
        c.len() < before
    })
}

/// The file `path` names, as the kernel would find it: through links, and for a file not yet
/// there, through its directory's.
fn resolved(path: &Path) -> PathBuf {
    if let Ok(p) = std::fs::canonicalize(path) {
        return p;
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    match (std::fs::canonicalize(dir), path.file_name()) {
        (Ok(d), Some(name)) => d.join(name),
        _ => path.to_path_buf(),
    }
}

/// What two exports into one file would share: the file's device and inode where it exists
/// (which sees through links, hard ones too), else the path it resolves to. `None` for a
/// stream, which several exports may share.
fn identity(path: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    if is_stream(path) {
        return None;
    }
    match std::fs::metadata(path) {
        Ok(m) => Some(format!("{}:{}", m.dev(), m.ino())),
        Err(_) => Some(resolved(path).to_string_lossy().into_owned()),
    }
}

/// A device, a pipe, or a path to a process's streams (`/dev/...`, `/proc/.../fd/...`,
/// which may reopen a file the shell redirected to with `>>`).
fn is_stream(path: &Path) -> bool {
    path.starts_with("/dev")
        || path.starts_with("/proc")
        || std::fs::metadata(path).is_ok_and(|m| !m.is_file())
}

impl Target {
    fn open(path: &Path) -> std::io::Result<Target> {
        use std::fs::OpenOptions;
        let (file, how) = if is_stream(path) {
            (OpenOptions::new().append(true).open(path)?, How::Stream)
        } else if std::fs::metadata(path).is_ok() {
            // Opened now, so that a path that cannot be written fails before the run; not
            // truncated until the report is whole.
            (OpenOptions::new().write(true).open(path)?, How::Replace)
        } else {
            // Exclusively: a link planted at the path meanwhile is not followed. A dangling
            // link the user named is followed, as a shell's `>` would.
            let dangling = std::fs::symlink_metadata(path).is_ok_and(|m| m.is_symlink());
            let real = if dangling {
                resolved(path)
            } else {
                path.to_path_buf()
            };
            let f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&real)?;
            let real = resolved(&real);
            if let Ok(mut c) = CREATED.lock() {
                c.push(real.clone());
            }
            (f, How::Created(real))
        };
        Ok(Target {
            path: path.to_path_buf(),
            file,
            how,
        })
    }

    fn write(&self, text: &str) -> std::io::Result<()> {
        use std::io::{Seek, SeekFrom};
        let mut f = &self.file;
        if !matches!(self.how, How::Stream) {
            f.set_len(0)?;
            f.seek(SeekFrom::Start(0))?;
        }
        f.write_all(text.as_bytes())?;
        f.flush()?;
        if let How::Created(real) = &self.how {
            settle(real);
        }
        Ok(())
    }

    fn discard(&self) {
        if let How::Created(real) = &self.how
            && settle(real)
        {
            let _ = std::fs::remove_file(real);
        }
    }
}

pub struct Exports(Vec<Export>);

impl Exports {
    pub fn open(args: &HammerArgs) -> anyhow::Result<Exports> {
        let wanted = [
            (Kind::Json, "--export-json", &args.export_json),
            (Kind::Markdown, "--export-markdown", &args.export_markdown),
            (Kind::Html, "--export-html", &args.export_html),
            (Kind::Metrics, "--metrics-file", &args.metrics_file),
            (Kind::History, "--history", &args.history),
        ];
        let mut out = Exports(Vec::new());
        let mut to_stdout = Vec::new();
        // Two exports into one file would leave only the last. Asked of every path before
        // any is opened (opening creates a file, and would change the answer).
        let mut seen: Vec<(String, &str)> = Vec::new();
        for (_, flag, path) in &wanted {
            let Some(path) = path.as_ref().filter(|p| *p != Path::new("-")) else {
                continue;
            };
            let Some(same) = identity(path) else { continue };
            if let Some((_, other)) = seen.iter().find(|(p, _)| *p == same) {
                return Err(UsageError(format!(
                    "{other} and {flag} both write '{}'; give each export a path of its own",
                    path.display()
                ))
                .into());
            }
            seen.push((same, flag));
        }
        for (kind, flag, path) in wanted {
            let Some(path) = path else { continue };
            if path == Path::new("-") {
                to_stdout.push(flag);
                out.0.push(Export { kind, target: None });
                continue;
            }
            match Target::open(path) {
                Ok(t) => out.0.push(Export {
                    kind,
                    target: Some(t),
                }),
                Err(e) => {
                    out.discard();
                    return Err(UsageError(format!(
                        "cannot write {flag} '{}': {e} (give a writable path, or - for stdout)",
                        path.display()
                    ))
                    .into());
                }
            }
        }
        if to_stdout.len() > 1 {
            out.discard();
            return Err(UsageError(format!(
                "{} ask for stdout; only one export can go there",
                to_stdout.join(" and ")
            ))
            .into());
        }
        Ok(out)
    }

    /// Writes every export; returns whether one of them took stdout.
    pub fn write(&self, w: &Written<'_>) -> anyhow::Result<bool> {
        let mut stdout_taken = false;
        for e in &self.0 {
            let text = match e.kind {
                Kind::Json => format!("{}\n", serde_json::to_string_pretty(w.document)?),
                Kind::Markdown => render::hammer_markdown(w.reports, w.context),
                Kind::Html => render::hammer_html(w.reports, w.context),
                Kind::Metrics => w.metrics.encode(),
                Kind::History => history_text(w.history)?,
            };
            match &e.target {
                Some(t) => {
                    t.write(&text).map_err(|err| {
                        anyhow::anyhow!("could not write '{}': {err}", t.path.display())
                    })?;
                }
                None => {
                    stdout_taken = true;
                    let mut out = std::io::stdout().lock();
                    out.write_all(text.as_bytes())?;
                    out.flush()?;
                }
            }
        }
        Ok(stdout_taken)
    }

    /// Removes the temporary files opened so far (the run failed: nothing to report); what
    /// the paths held before stays as it was.
    pub fn discard(&self) {
        for e in &self.0 {
            if let Some(t) = &e.target {
                t.discard();
            }
        }
    }
}

/// What the exports are made of.
pub struct Written<'a> {
    pub reports: &'a [Report],
    pub document: &'a HammerDocument<'a>,
    pub context: &'a Context,
    pub metrics: &'a lockctl_core::metrics::Metrics,
    pub history: Option<&'a History>,
}

/// The one run's history as JSON Lines.
fn history_text(history: Option<&History>) -> anyhow::Result<String> {
    let Some(history) = history else {
        anyhow::bail!("the run kept no history to write");
    };
    let mut out = Vec::new();
    lockctl_hammer::history::write(history, &mut out)?;
    Ok(String::from_utf8(out)?)
}
