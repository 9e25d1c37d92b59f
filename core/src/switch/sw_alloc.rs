//! Switch allocator: a separable, output-first round-robin arbiter. Each
//! allocation round, every output port grants one of the input VCs
//! requesting it, starting after the one it granted last; an input port
//! sends at most one flit per round (one crossbar input).

/// Requests and round-robin pointers, reused across rounds (no allocation
/// after the first rounds).
#[derive(Debug)]
pub struct SwitchAllocator {
    /// Per output port: requesting input VC indices this round.
    requests: Vec<Vec<u32>>,
    /// Per output port: the input VC index granted last.
    last_grant: Vec<u32>,
    /// Per input port: granted in this round.
    input_busy: Vec<bool>,
    /// Output ports that have requests this round.
    active_outputs: Vec<u16>,
    /// Rotates which output picks first.
    round: usize,
    vcs: u32,
}

impl SwitchAllocator {
    pub fn new(radix: usize, vcs: u8) -> Self {
        SwitchAllocator {
            requests: vec![Vec::new(); radix],
            last_grant: vec![u32::MAX; radix],
            input_busy: vec![false; radix],
            active_outputs: Vec::new(),
            round: 0,
            vcs: vcs as u32,
        }
    }

    /// Input VC `input` wants to send a flit through output `out`.
    pub fn request(&mut self, out: u16, input: u32) {
        let r = &mut self.requests[out as usize];
        if r.is_empty() {
            self.active_outputs.push(out);
        }
        r.push(input);
    }

    /// Resolves this round's requests into `grants` (output, input VC) and
    /// clears them.
    pub fn allocate(&mut self, grants: &mut Vec<(u16, u32)>) {
        grants.clear();
        // Visit outputs in a rotating order too, so no output always
        // gets the first pick of inputs.
        self.active_outputs.sort_unstable();
        let n = self.active_outputs.len();
        self.round = self.round.wrapping_add(1);
        let start = if n > 0 { self.round % n } else { 0 };
        for k in 0..n {
            let out = self.active_outputs[(start + k) % n] as usize;
            let reqs = &mut self.requests[out];
            let last = self.last_grant[out];
            // The first requester after `last` in index order, wrapping.
            let mut best: Option<u32> = None;
            let mut best_key = u64::MAX;
            for &inp in reqs.iter() {
                let port = (inp / self.vcs) as usize;
                if self.input_busy[port] {
                    continue;
                }
                let key = if last == u32::MAX || inp > last {
                    inp as u64
                } else {
                    inp as u64 + (1u64 << 32)
                };
                if key < best_key {
                    best_key = key;
                    best = Some(inp);
                }
            }
            reqs.clear();
            if let Some(inp) = best {
                self.input_busy[(inp / self.vcs) as usize] = true;
                self.last_grant[out] = inp;
                grants.push((out as u16, inp));
            }
        }
        for &(_, inp) in grants.iter() {
            self.input_busy[(inp / self.vcs) as usize] = false;
        }
        self.active_outputs.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_alternates_between_competing_inputs() {
        let mut a = SwitchAllocator::new(3, 1);
        let mut grants = Vec::new();
        let mut order = Vec::new();
        for _ in 0..4 {
            a.request(2, 0);
            a.request(2, 1);
            a.allocate(&mut grants);
            assert_eq!(grants.len(), 1);
            order.push(grants[0].1);
        }
        assert_eq!(order, vec![0, 1, 0, 1]);
    }

    #[test]
    fn an_input_port_sends_one_flit_per_round() {
        // Two VCs of input port 0 want outputs 1 and 2.
        let mut a = SwitchAllocator::new(3, 2);
        let mut grants = Vec::new();
        a.request(1, 0);
        a.request(2, 1);
        a.allocate(&mut grants);
        assert_eq!(grants.len(), 1);
    }
}
