//! The command line that replays a hunt: this one with its seed, the Redis actually used, and
//! every secret taken from an environment variable the report names, quoted for `sh`.

use crate::cmd::Ctx;
use lockctl_render::Replay;

/// A line break in a replay line, where a command substitution cannot carry it (at the end of
/// an argument): the variable [`NEWLINE_SET`] sets, its dot taken off.
const NEWLINE: &str = "${LOCKCTL_NL%.}";

/// What a replay line that uses [`NEWLINE`] starts with: printable, and POSIX `sh`.
const NEWLINE_SET: &str = "LOCKCTL_NL=\"$(printf '\\n.')\"; ";

/// The command that replays this hunt: this command line with `--seed` set to `seed` and the
/// Redis the user named from the environment put on the line (`--redis` from `REDIS_URL`,
/// `--lock-node` from `LOCKCTL_LOCK_NODES`), each secret in it taken from an environment
/// variable the report names, so that the line runs as printed.
///
/// A Redis nobody named stays unnamed: `--redis` on the line turns on the Redis faults the
/// original hunt left out (it faults only a named Redis), and the same seed then draws other
/// faults: another hunt than the one it replays.
pub(super) fn replay_command(ctx: &Ctx, seed: u64) -> Replay {
    let mut args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--seed") {
        args.drain(i..(i + 2).min(args.len()));
    }
    args.retain(|a| !a.starts_with("--seed="));
    args.push("--seed".into());
    args.push(seed.to_string());
    if let Some(first) = args.first_mut() {
        *first = "lockctl".into();
    }
    let named = |flag: &str| {
        args.iter()
            .any(|a| a == flag || a.strip_prefix(flag).is_some_and(|v| v.starts_with('=')))
    };
    let mut from_env = Vec::new();
    if !named("--redis") && ctx.redis_named {
        from_env.extend(["--redis".to_string(), ctx.url.clone()]);
    }
    // The Redlock nodes too, when they came from the environment.
    if !named("--lock-node")
        && let Ok(nodes) = std::env::var("LOCKCTL_LOCK_NODES")
    {
        for node in nodes.split(',').filter(|n| !n.trim().is_empty()) {
            from_env.extend(["--lock-node".to_string(), node.trim().to_string()]);
        }
    }
    if !args.is_empty() {
        args.splice(1..1, from_env);
    }
    let mut replay = Replay::default();
    let mut words = Vec::new();
    let mut flag: Option<String> = None;
    for arg in &args {
        let (spans, of) = if arg.starts_with("--") && !arg.contains(['=', ' ']) {
            flag = Some(arg.clone());
            (Vec::new(), None)
        } else if let Some((f, _)) = arg.split_once('=').filter(|(f, _)| f.starts_with("--")) {
            flag = None;
            (
                lockctl_core::redact::secret_spans(None, arg),
                Some(f.to_string()),
            )
        } else {
            let of = flag.take();
            (lockctl_core::redact::secret_spans(of.as_deref(), arg), of)
        };
        let mut word = String::new();
        let mut at = 0;
        for (a, b) in spans
            .into_iter()
            .filter(|&(a, b)| !is_placeholder(&arg[a..b]))
        {
            if a > at {
                word.push_str(&shell_quote(&arg[at..a]));
            }
            let what = of.as_deref().unwrap_or("the command line");
            word.push_str(&format!("\"${{{}}}\"", replay.secret(&arg[a..b], what)));
            at = b;
        }
        if at < arg.len() || arg.is_empty() {
            word.push_str(&shell_quote(&arg[at..]));
        }
        words.push(word);
    }
    replay.command = words.join(" ");
    if replay.command.contains(NEWLINE) {
        replay.command.insert_str(0, NEWLINE_SET);
    }
    replay
}

/// A value made of placeholders only (`{order}`, `Bearer {token}`): no secret, and the replay
/// needs it as it is.
pub(super) fn is_placeholder(value: &str) -> bool {
    let mut rest = value.trim();
    for scheme in ["Bearer ", "Basic ", "Token "] {
        if rest.len() > scheme.len() && rest[..scheme.len()].eq_ignore_ascii_case(scheme) {
            rest = rest[scheme.len()..].trim_start();
        }
    }
    !rest.is_empty() && lockctl_core::redact::only_placeholders(rest)
}

/// `a` as one shell word that `sh` reads back as `a`. A control character (C0, DEL, C1, a
/// line break) and an invisible format character (the bidi controls U+202A..U+202E,
/// U+2066..U+2069, U+200E, U+200F, U+061C; zero-width characters; U+2028, U+2029) is written
/// as `"$(printf '\033')"` (its bytes in octal, as POSIX printf reads them), so that the line
/// shows nothing a terminal acts on (an escape that colours or erases, a carriage return, a
/// line break that makes one command look like two, a U+202E that shows the rest of the line
/// reversed) and still runs as printed.
///
/// Line breaks that end the argument (a body from a facts file's `"""` string ends with one)
/// cannot be written so: a command substitution drops the line breaks that end it. Each is
/// written `"${LOCKCTL_NL%.}"`, a line break and a dot with the dot taken off, and the line
/// then starts by setting that variable ([`NEWLINE_SET`]).
pub(super) fn shell_quote(a: &str) -> String {
    let body = a.trim_end_matches('\n');
    if body.len() < a.len() {
        let breaks = format!("\"{}\"", NEWLINE.repeat(a.len() - body.len()));
        return match body.is_empty() {
            true => breaks,
            false => format!("{}{breaks}", shell_quote(body)),
        };
    }
    let raw = is_hidden_in_a_line;
    if !a.contains(raw) {
        return quote_printable(a);
    }
    let mut out = String::new();
    let mut rest = a;
    while !rest.is_empty() {
        let printable = rest.find(raw).unwrap_or(rest.len());
        if printable > 0 {
            out.push_str(&quote_printable(&rest[..printable]));
        }
        rest = &rest[printable..];
        let mut controls = rest.find(|c: char| !raw(c)).unwrap_or(rest.len());
        // A command substitution drops the line breaks that end it: the character after them
        // (there is one: the argument's own last line breaks were taken off above) goes into
        // the same printf.
        if rest[..controls].ends_with('\n') {
            controls += rest[controls..].chars().next().map_or(0, char::len_utf8);
        }
        if controls > 0 {
            let octal: String = rest[..controls]
                .bytes()
                .map(|b| format!("\\{b:03o}"))
                .collect();
            out.push_str(&format!("\"$(printf '{octal}')\""));
        }
        rest = &rest[controls..];
    }
    out
}

/// Whether `c` must not be printed as it is in a line a user reads and copies: a control
/// character, or a format character that is invisible or reorders what follows.
pub(super) fn is_hidden_in_a_line(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{61c}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{2069}'
                | '\u{feff}'
        )
}

/// `a` (no control character but line breaks) as one shell word.
pub(super) fn quote_printable(a: &str) -> String {
    if !a.is_empty()
        && a.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=,@%+".contains(c))
    {
        a.to_string()
    } else {
        format!("'{}'", a.replace('\'', r"'\''"))
    }
}
