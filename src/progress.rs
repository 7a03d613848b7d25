//! Progress of the long one-shot commands (`upgrade --all`, `retention`): on a terminal, a line
//! on stderr rewritten after each Site (done/total, failures); otherwise (a log, a pipe, CI)
//! nothing while running and one summary line at the end, so logs stay readable.

use std::io::Write;

/// How far a command is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Sites handled so far.
    pub done: usize,
    /// Sites to handle.
    pub total: usize,
    /// Sites written (upgraded, archived, deleted; in a dry run: that would be).
    pub changed: usize,
    /// Sites that failed.
    pub failed: usize,
}

/// Prints progress to `out`: live when `live` (a terminal), else only the summary.
pub struct Progress<W: Write> {
    command: &'static str,
    changed: &'static str,
    live: bool,
    out: W,
    last: Counts,
    drawn: bool,
}

impl Progress<std::io::Stderr> {
    /// Progress on stderr, live when stderr is a terminal.
    pub fn stderr(command: &'static str, changed: &'static str) -> Self {
        use std::io::IsTerminal;
        let err = std::io::stderr();
        let live = err.is_terminal();
        Progress::new(command, changed, live, err)
    }
}

impl<W: Write> Progress<W> {
    /// `command` names the command in the lines; `changed` says what a changed Site is
    /// ("upgraded", "acted on").
    pub fn new(command: &'static str, changed: &'static str, live: bool, out: W) -> Self {
        Progress {
            command,
            changed,
            live,
            out,
            last: Counts::default(),
            drawn: false,
        }
    }

    /// Records the counts; on a terminal, redraws the progress line.
    pub fn update(&mut self, counts: Counts) {
        self.last = counts;
        if self.live {
            // \r and clear-to-end-of-line: the line is rewritten in place.
            let _ = write!(self.out, "\r\x1b[K{}", self.line());
            let _ = self.out.flush();
            self.drawn = true;
        }
    }

    /// The summary line (on a terminal, the progress line is finished with it).
    pub fn finish(mut self) {
        if self.live && self.drawn {
            let _ = write!(self.out, "\r\x1b[K");
        }
        let _ = writeln!(self.out, "{}", self.line());
        let _ = self.out.flush();
    }

    fn line(&self) -> String {
        let c = self.last;
        format!(
            "{}: {}/{} Sites done, {} {}, {} failed",
            self.command, c.done, c.total, c.changed, self.changed, c.failed
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(live: bool) -> String {
        let mut out = Vec::new();
        let mut p = Progress::new("upgrade", "upgraded", live, &mut out);
        for done in 0..=3 {
            p.update(Counts {
                done,
                total: 3,
                changed: done.min(2),
                failed: usize::from(done == 3),
            });
        }
        p.finish();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn not_a_terminal_gets_one_summary_line() {
        assert_eq!(
            run(false),
            "upgrade: 3/3 Sites done, 2 upgraded, 1 failed\n"
        );
    }

    #[test]
    fn a_terminal_sees_the_line_rewritten_then_the_summary() {
        let out = run(true);
        assert!(out.starts_with("\r\x1b[Kupgrade: 0/3 Sites done, 0 upgraded, 0 failed"));
        assert!(out.contains("\r\x1b[Kupgrade: 2/3 Sites done, 2 upgraded, 0 failed"));
        assert!(out.ends_with("\r\x1b[Kupgrade: 3/3 Sites done, 2 upgraded, 1 failed\n"));
        assert_eq!(out.matches('\n').count(), 1, "{out:?}");
    }
}
