//! The hammer's progress bar on stderr: only when stderr is a terminal, colour is on (`--color`,
//! `NO_COLOR`) and `-q` is not given, so pipes, files and CI logs stay clean. The hammer itself
//! only counts finished requests; a thread here draws the count.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

pub struct Bar {
    done: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Bar {
    /// A bar for `total` requests when `show` (stderr is a terminal, colour is on, not `-q`),
    /// `None` otherwise.
    pub fn start(show: bool, total: u64, label: &str, show_label: bool) -> Option<Bar> {
        if !show {
            return None;
        }
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        let template = if show_label {
            "{prefix:>7} [{bar:30}] {pos}/{len} {rate} eta {eta}"
        } else {
            "[{bar:30}] {pos}/{len} {rate} eta {eta}"
        };
        if let Ok(style) = ProgressStyle::with_template(template) {
            // indicatif's own {per_sec} prints four decimals ("4,550.3754/s").
            let style = style.with_key("rate", |s: &ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{:.0}/s", s.per_sec());
            });
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(label.to_string());
        let done = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (d, st) = (done.clone(), stop.clone());
        let thread = thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                bar.set_position(d.load(Ordering::Relaxed));
                thread::sleep(Duration::from_millis(100));
            }
            bar.finish_and_clear();
        });
        Some(Bar {
            done,
            stop,
            thread: Some(thread),
        })
    }

    /// The counter the hammer increments.
    pub fn counter(&self) -> Arc<AtomicU64> {
        self.done.clone()
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
