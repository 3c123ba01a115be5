//! Which process on this machine holds a TCP connection: how the hunt tells the clients of a
//! Redis that belong to the system under test (its `--serve` processes) from the ones that do
//! not, before it faults that Redis. Read from `/proc` through the procfs crate: the socket's
//! inode from `/proc/net/tcp` (and `tcp6`) by its local address, then the process with a file
//! descriptor on that inode.

use std::collections::HashMap;
use std::net::SocketAddr;

/// A connection's owner: its pid and its command name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// The process id.
    pub pid: i32,
    /// Its command name (`/proc/PID/comm`).
    pub command: String,
}

/// The owners of the TCP connections whose local ends are `addrs` (as a server lists its
/// clients' addresses), for those this machine holds and this process may look at. An address
/// with no owner found is left out: another machine's, or a process of another user's.
pub fn owners(addrs: &[SocketAddr]) -> HashMap<SocketAddr, Owner> {
    let mut inodes: HashMap<u64, SocketAddr> = HashMap::new();
    let tables = [procfs::net::tcp(), procfs::net::tcp6()];
    for entry in tables.into_iter().flatten().flatten() {
        if addrs.contains(&entry.local_address) {
            inodes.insert(entry.inode, entry.local_address);
        }
    }
    let mut found = HashMap::new();
    if inodes.is_empty() {
        return found;
    }
    let Ok(all) = procfs::process::all_processes() else {
        return found;
    };
    for p in all.flatten() {
        let Ok(fds) = p.fd() else { continue };
        for fd in fds.flatten() {
            if let procfs::process::FDTarget::Socket(inode) = fd.target
                && let Some(addr) = inodes.get(&inode)
            {
                let command = p.stat().map(|s| s.comm).unwrap_or_default();
                found.insert(
                    *addr,
                    Owner {
                        pid: p.pid,
                        command,
                    },
                );
            }
        }
    }
    found
}

/// Of `pids` (a process tree, parents before their children), the web tier: those that hold a
/// listening TCP socket (a server and the workers it forked, which share its socket), and the
/// processes a web process forked that still run its command line (a forking server's request
/// handlers: one that has answered and is exiting no longer holds the socket, and was taken
/// for a queue's consumer, which a fault then picked on its own). The others serve no port and
/// run a command of their own (a queue's consumer, say).
pub fn web_tier(pids: &[i32]) -> std::collections::HashSet<i32> {
    let facts: Vec<(i32, i32, Vec<String>)> = pids
        .iter()
        .filter_map(|&pid| {
            let p = procfs::process::Process::new(pid).ok()?;
            Some((pid, p.stat().ok()?.ppid, p.cmdline().unwrap_or_default()))
        })
        .collect();
    with_forked_copies(listening(pids), &facts)
}

/// `web` and, in tree order, each process of `facts` (pid, parent, command line) whose parent
/// is of the web tier and runs the same command line.
fn with_forked_copies(
    mut web: std::collections::HashSet<i32>,
    facts: &[(i32, i32, Vec<String>)],
) -> std::collections::HashSet<i32> {
    let lines: HashMap<i32, &Vec<String>> = facts.iter().map(|(p, _, c)| (*p, c)).collect();
    for (pid, ppid, cmdline) in facts {
        if web.contains(ppid) && !cmdline.is_empty() && lines.get(ppid) == Some(&cmdline) {
            web.insert(*pid);
        }
    }
    web
}

/// Of `pids`, those that hold a listening TCP socket.
fn listening(pids: &[i32]) -> std::collections::HashSet<i32> {
    let mut inodes = std::collections::HashSet::new();
    let tables = [procfs::net::tcp(), procfs::net::tcp6()];
    for entry in tables.into_iter().flatten().flatten() {
        if entry.state == procfs::net::TcpState::Listen {
            inodes.insert(entry.inode);
        }
    }
    pids.iter()
        .copied()
        .filter(|pid| {
            procfs::process::Process::new(*pid)
                .and_then(|p| p.fd())
                .is_ok_and(|fds| {
                    fds.flatten().any(|fd| {
                        matches!(fd.target, procfs::process::FDTarget::Socket(i) if inodes.contains(&i))
                    })
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A forking server's request handler that no longer holds the listening socket (it is
    /// exiting) is still of the web tier, and its own fork too; a queue's consumer the server
    /// started (another command line) is not, nor a process outside the tree.
    #[test]
    fn a_forked_copy_of_a_web_process_is_of_the_web_tier_and_a_consumer_is_not() {
        let line = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        let facts = [
            (10, 1, line("python shop.py")),
            (11, 10, line("python shop.py")),
            (12, 11, line("python shop.py")),
            (13, 10, line("python shop.py worker")),
            (14, 13, line("python shop.py worker")),
            (15, 99, line("python shop.py")),
            (16, 10, Vec::new()),
        ];
        let web = with_forked_copies([10].into(), &facts);
        let mut web: Vec<i32> = web.into_iter().collect();
        web.sort();
        assert_eq!(web, [10, 11, 12]);
    }

    #[test]
    fn a_connection_of_this_process_is_found_as_its_own() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let local = client.local_addr().unwrap();
        let found = owners(&[local]);
        assert_eq!(
            found.get(&local).map(|o| o.pid),
            Some(std::process::id() as i32)
        );
        let nobody: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert!(owners(&[nobody]).is_empty());
    }
}
