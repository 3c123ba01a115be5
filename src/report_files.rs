//! The hammer's report files (`--export-json`, `--export-markdown`, `--export-html`,
//! `--metrics-file`): opened before the run (so a bad path fails before any purchase) and
//! written after it. A regular file is written under a temporary name beside it and renamed
//! over the path only when the report is whole, so a run that fails leaves whatever was there
//! before untouched, and no half-written report. A path that is not a regular file (a device
//! such as /dev/null, a pipe such as `>(jq .)`) is written in place and never removed. `-`
//! means stdout, which then carries only that export.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::cli::HammerArgs;
use crate::cmd::UsageError;
use lockctl::hammer::Report;
use lockctl::render::{self, Context};

#[derive(Clone, Copy)]
enum Kind {
    Json,
    Markdown,
    Html,
    Metrics,
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
    /// For a regular file: the temporary file being written, and the path it is renamed to.
    swap: Option<(PathBuf, PathBuf)>,
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

impl Target {
    fn open(path: &Path) -> std::io::Result<Target> {
        let special = std::fs::metadata(path).is_ok_and(|m| !m.is_file());
        if special {
            let file = std::fs::OpenOptions::new().write(true).open(path)?;
            return Ok(Target {
                path: path.to_path_buf(),
                file,
                swap: None,
            });
        }
        // Through a link, the file it names is the one replaced.
        let real = resolved(path);
        let dir = match real.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = real
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let temp = dir.join(format!(".{name}.lockctl-{}.tmp", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)
            .or_else(|e| match e.kind() {
                // One a killed run left behind.
                std::io::ErrorKind::AlreadyExists => File::create(&temp),
                _ => Err(e),
            })?;
        if let Ok(m) = std::fs::metadata(&real) {
            let _ = std::fs::set_permissions(&temp, m.permissions());
        }
        Ok(Target {
            path: path.to_path_buf(),
            file,
            swap: Some((temp, real)),
        })
    }

    fn write(&self, text: &str) -> std::io::Result<()> {
        let mut f = &self.file;
        f.write_all(text.as_bytes())?;
        f.flush()?;
        if let Some((temp, real)) = &self.swap {
            std::fs::rename(temp, real)?;
        }
        Ok(())
    }

    fn discard(&self) {
        if let Some((temp, _)) = &self.swap {
            let _ = std::fs::remove_file(temp);
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
        ];
        let mut out = Exports(Vec::new());
        let mut to_stdout = Vec::new();
        let mut seen: Vec<(PathBuf, &str)> = Vec::new();
        for (kind, flag, path) in wanted {
            let Some(path) = path else { continue };
            if path == Path::new("-") {
                to_stdout.push(flag);
                out.0.push(Export { kind, target: None });
                continue;
            }
            // Two exports into one file would leave only the last.
            let same = resolved(path);
            if let Some((_, other)) = seen.iter().find(|(p, _)| *p == same) {
                out.discard();
                return Err(UsageError(format!(
                    "{other} and {flag} both write '{}'; give each export a path of its own",
                    path.display()
                ))
                .into());
            }
            seen.push((same, flag));
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
    pub fn write(
        &self,
        reports: &[Report],
        document: &Value,
        context: &Context,
    ) -> anyhow::Result<bool> {
        let mut stdout_taken = false;
        for e in &self.0 {
            let text = match e.kind {
                Kind::Json => format!("{document:#}\n"),
                Kind::Markdown => render::hammer_markdown(reports, context),
                Kind::Html => render::hammer_html(reports, context),
                Kind::Metrics => lockctl::metrics::global().encode(),
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
