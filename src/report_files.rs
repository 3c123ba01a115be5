//! The hammer's report files (`--export-json`, `--export-markdown`, `--export-html`,
//! `--metrics-file`): opened before the run (so a bad path fails before any purchase), written
//! after it, and removed if the run fails, so no half-written report is left behind. `-` means stdout, which then carries only that export.

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
    target: Option<(PathBuf, File)>,
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
        for (kind, flag, path) in wanted {
            let Some(path) = path else { continue };
            if path == Path::new("-") {
                to_stdout.push(flag);
                out.0.push(Export { kind, target: None });
                continue;
            }
            match File::create(path) {
                Ok(f) => out.0.push(Export {
                    kind,
                    target: Some((path.clone(), f)),
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
                Some((path, file)) => {
                    let mut f = file;
                    f.write_all(text.as_bytes()).map_err(|err| {
                        anyhow::anyhow!("could not write '{}': {err}", path.display())
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

    /// Removes the files opened so far (the run failed: nothing to report).
    pub fn discard(&self) {
        for e in &self.0 {
            if let Some((path, _)) = &e.target {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}
