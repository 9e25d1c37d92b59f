//! Dynamic local rerouting (DLR) in k-ary n-trees (seed 002, Sem-Jacobsen et
//! al., "Dynamic Fault Tolerance in Fat Trees"): the per-head-flit decision a
//! switch takes when the port its routing wants may be dead.
//!
//! Everything here is sans-IO: the caller passes the local port liveness
//! (`port_up`), the time (`now`, ns) and the packet's DLR header state, and
//! gets back one [`DlrDecision`].
//!
//! **Conventions.** The digest numbers tiers 0 = top; this crate's model has
//! level 0 = leaves (seed 000). Translated to our model (see
//! [`crate::topology::generators::kary_ntree`]):
//! - host `d` has base-k digits `d_0..d_{n-1}`, `d_0` least significant
//!   (it is the leaf port the host hangs on);
//! - a switch at level ℓ has digits `1..n-1` (`label[i-1]` = digit i); it
//!   reaches `d` downward iff its digits `ℓ+1..n-1` equal `d`'s, and then its
//!   down port towards `d` is `d_ℓ` (digest §2.2 "downward reachability");
//! - up port `k+j` leads to the parent whose digit `ℓ+1` is `j`, arriving on
//!   that parent's down port (our digit ℓ+1), so an upper switch sits on the
//!   same up-port number of every lower switch of its group (digest P1);
//! - base routing is d-mod-k: up port `k + d_ℓ` at level ℓ (digest §3.1);
//! - the test sequence D is `k, k+1, .., 2k-1` at every switch (digest §3.4).
//!
//! The four algorithms are the digest's *resolved* versions (§3.4–§3.7 with
//! resolutions R1–R8 of §8); each rule is tagged with its step number.
//! Where the paper leaves a choice "arbitrary" (§8 item 10) the first alive
//! port in cyclic order is taken, so the deterministic variants really are.
//!
//! **What a packet carries.** The layer (NL / ML, or NL / ML1 / ML2) is the
//! flit's VC; [`DlrConfig::vcs_needed`] says how many. The switch variants
//! also need the one-byte [`PortField`] in the head ([`PortField::to_wire`]).
//! Nothing else: the adaptive re-route vector is switch state.
//!
//! **Recovery (§3.9).** No table is ever changed: when `port_up` reports a
//! repaired port, the table port is simply taken again; packets already on a
//! detour finish it; the adaptive vector empties after
//! [`DlrConfig::reroute_reset_ns`] without U-turns ([`DlrSwitch::poll_timeout`],
//! [`DlrSwitch::handle_timeout`]).

use crate::topology::{Family, HostId, PortNo, SwitchId, Topology};
use serde::{Deserialize, Serialize};

/// Normal layer (every variant).
pub const NL: u8 = 0;
/// Re-routing layer of the deterministic link algorithm (digest §3.4).
pub const ML: u8 = 1;
/// Lower-half re-routing layer of the deterministic switch algorithm (§3.5).
pub const ML1: u8 = 1;
/// Upper-half re-routing layer of the deterministic switch algorithm (§3.5).
pub const ML2: u8 = 2;

/// Default inactivity period after which an adaptive switch forgets a bit
/// of its re-route vector. The paper gives no value (digest §8 item 9 suggests
/// 10–100× the in-group round trip); 100 µs is ~100× a loopback-UDP hop.
pub const DEFAULT_REROUTE_RESET_NS: u64 = 100_000;

/// Which of the paper's algorithm families.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DlrVariant {
    /// Test sequence D plus re-routing VCs; no switch state (§3.4, §3.5).
    Deterministic,
    /// k-bit re-route vector with an inactivity timer; one VC (§3.6, §3.7).
    Adaptive,
}

/// Which faults the algorithm is built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DlrFaults {
    /// Link faults only: 1-hop switch groups (§3.4, §3.6).
    Link,
    /// Link and switch faults: 2-hop groups and the header port field (§3.5, §3.7).
    Switch,
}

/// Parameters shared by every switch of one fabric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DlrConfig {
    pub k: u32,
    pub n: u32,
    pub variant: DlrVariant,
    pub faults_handled: DlrFaults,
    /// Adaptive only: a bit of the re-route vector is cleared after this long
    /// without a U-turn through its port (digest §3.6, §3.9).
    pub reroute_reset_ns: u64,
    /// Deterministic link only, for reproducing the digest's §8 R1 analysis:
    /// apply the paper's rule 2b literally, so that an LCA whose down link is
    /// dead bounces the packet in ML instead of NL. Known to disconnect pairs
    /// with a single fault; never use it in a fabric.
    #[serde(default)]
    pub literal_lca_bounce: bool,
}

impl DlrConfig {
    pub fn new(k: u32, n: u32, variant: DlrVariant, faults_handled: DlrFaults) -> Self {
        DlrConfig {
            k,
            n,
            variant,
            faults_handled,
            reroute_reset_ns: DEFAULT_REROUTE_RESET_NS,
            literal_lca_bounce: false,
        }
    }

    /// Virtual channels the variant needs for its deadlock-freedom claim with
    /// more than one fault (digest §3.11): 2 (NL, ML) for deterministic link,
    /// 3 (NL, ML1, ML2) for deterministic switch, 1 for the adaptive ones.
    pub fn vcs_needed(&self) -> u8 {
        match (self.variant, self.faults_handled) {
            (DlrVariant::Deterministic, DlrFaults::Link) => 2,
            (DlrVariant::Deterministic, DlrFaults::Switch) => 3,
            (DlrVariant::Adaptive, _) => 1,
        }
    }

    /// Whether packets need the header port field (switch variants, §3.5).
    pub fn needs_port_field(&self) -> bool {
        self.faults_handled == DlrFaults::Switch
    }

    /// Number of arbitrary simultaneous faults the paper guarantees (k−1,
    /// leaf switches and node links excluded; §4).
    pub fn guaranteed_faults(&self) -> u32 {
        self.k.saturating_sub(1)
    }

    fn validate(&self) -> Result<(), DlrError> {
        // k ≤ 64: the re-route vector is a u64; k ≤ 127: the port field is an i8.
        if !(2..=64).contains(&self.k) || self.n < 1 || self.n > 32 {
            return Err(DlrError::BadConfig {
                k: self.k,
                n: self.n,
                reason: "DLR needs 2 <= k <= 64 and 1 <= n <= 32",
            });
        }
        let hosts = (self.k as u64).checked_pow(self.n);
        if hosts.is_none_or(|h| h > u32::MAX as u64) {
            return Err(DlrError::BadConfig {
                k: self.k,
                n: self.n,
                reason: "k^n host ids do not fit in a HostId",
            });
        }
        Ok(())
    }
}

/// Bad input to the DLR logic; each names the element at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DlrError {
    #[error("DLR config k={k}, n={n} is invalid: {reason}")]
    BadConfig {
        k: u32,
        n: u32,
        reason: &'static str,
    },
    #[error("topology `{topology}` is not a k-ary n-tree with k={k}, n={n}")]
    NotKaryNTree { topology: String, k: u32, n: u32 },
    #[error(
        "switch {switch} has no level or a label of {got} digits (a {k}-ary {n}-tree needs n-1)"
    )]
    BadSwitch {
        switch: SwitchId,
        got: usize,
        k: u32,
        n: u32,
    },
    #[error("switch {switch}: port_up has {got} entries, radix is {radix}")]
    PortVector {
        switch: SwitchId,
        got: usize,
        radix: usize,
    },
    #[error("switch {switch}: input port {port} does not exist (radix {radix})")]
    BadInPort {
        switch: SwitchId,
        port: PortNo,
        radix: usize,
    },
    #[error("switch {switch}: input VC {vc} is not used by this DLR variant ({vcs} VCs)")]
    BadVc { switch: SwitchId, vc: u8, vcs: u8 },
    #[error("switch {switch}: destination host {dst} is outside the {hosts} hosts")]
    BadDestination {
        switch: SwitchId,
        dst: HostId,
        hosts: u64,
    },
    #[error(
        "switch {switch}: header port field names port {port}, but only 0..{k} are down ports"
    )]
    BadPortField {
        switch: SwitchId,
        port: PortNo,
        k: u32,
    },
}

/// The per-packet "port field" of the switch algorithms (digest §3.5). The
/// paper writes it as −1, −2 or a down-port number 0..k−1; the header byte
/// ([`PortField::to_wire`]) is offset so that the all-zero default head means
/// "not rerouted": 0 = −1, 1 = −2, 2 + p = port p.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PortField {
    /// −1: not being rerouted through a 2-hop group.
    #[default]
    Clear,
    /// −2: the next switch that receives this packet from above and cannot
    /// reach the destination is the U-turn switch.
    UturnNext,
    /// The down port of the middle switch that leads back to the U-turn switch.
    ReturnPort(PortNo),
}

impl PortField {
    /// Header encoding (one byte; k ≤ 64 keeps 2 + p < 256).
    pub fn to_wire(self) -> u8 {
        match self {
            PortField::Clear => 0,
            PortField::UturnNext => 1,
            PortField::ReturnPort(p) => (p as u8).saturating_add(2),
        }
    }

    /// Header decoding; `None` for a port number ≥ k.
    pub fn from_wire(v: u8, k: u32) -> Option<Self> {
        match v {
            0 => Some(PortField::Clear),
            1 => Some(PortField::UturnNext),
            p if ((p - 2) as u32) < k => Some(PortField::ReturnPort((p - 2) as PortNo)),
            _ => None,
        }
    }

    /// The paper's notation: −1, −2 or the port number.
    pub fn paper_value(self) -> i32 {
        match self {
            PortField::Clear => -1,
            PortField::UturnNext => -2,
            PortField::ReturnPort(p) => p as i32,
        }
    }
}

/// What DLR needs carried in a packet's head besides destination and VC.
/// Only the switch variants use it; hosts inject [`PortField::Clear`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DlrPacketState {
    pub port_field: PortField,
}

/// Which rule produced a forward decision (for metrics: reroutes, U-turns).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DlrStep {
    /// Table port (up phase d-mod-k or the unique down port).
    Normal,
    /// Step 1: the table up port is dead, another up port is used.
    UpDetour,
    /// Step 2a / 3a / 4a: misrouted down another down port.
    Misroute,
    /// Step 2b / 3b: sent back down the input port.
    Bounce,
    /// Step 3–5 / 4b: U-turn (down→up) at the U-turn switch.
    Uturn,
    /// Step 4c (det) / 4d (adaptive): middle switch sends the bounced packet
    /// back down to the U-turn switch via the port field.
    ReturnToUturn,
    /// Step 5 (det) / 6 (adaptive): middle switch above a U-turn climbs.
    Climb,
}

/// Why a packet is dropped: the fault set is beyond what DLR can route around.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DiscardReason {
    /// The leaf's link to the destination host is dead (not tolerated, §3.2).
    HostLinkDown,
    /// Every up port is dead.
    NoUpPort,
    /// The down port is dead and no other down port is alive.
    NoDownPort,
    /// The U-turn switch has tried every up port (step 4 / 5 / 7).
    UturnExhausted,
    /// The port a bounce or a port-field return must use is dead.
    ReturnPathDown,
}

/// What to do with a head flit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DlrDecision {
    Forward { port: PortNo, vc: u8, step: DlrStep },
    Discard { reason: DiscardReason },
}

/// The adaptive algorithms' per-switch k-bit re-route vector (digest §3.6):
/// bit j set = up port k+j led to an upper switch that bounced a packet.
/// Each bit is forgotten after a period without a U-turn through its own
/// port: the paper zeroes the whole vector after a period without any
/// U-turn, and a fault that keeps bouncing packets through one port would
/// then keep every other bit set for ever, among them bits set while the
/// faults were beyond the guarantee (every up port marked: every U-turn
/// discarded, long after the faults are back within it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RerouteVector {
    bits: u64,
    /// Per up port j: the time of the last U-turn through it.
    set_at: [u64; 64],
}

impl Default for RerouteVector {
    fn default() -> Self {
        RerouteVector {
            bits: 0,
            set_at: [0; 64],
        }
    }
}

impl RerouteVector {
    /// The set bits, lowest first.
    fn set(&self) -> impl Iterator<Item = u32> {
        let mut bits = self.bits;
        std::iter::from_fn(move || {
            (bits != 0).then(|| {
                let j = bits.trailing_zeros();
                bits &= bits - 1;
                j
            })
        })
    }

    /// The bits still set at `now`, `reset_ns` after their last U-turn.
    fn at(&self, now: u64, reset_ns: u64) -> u64 {
        self.set()
            .filter(|&j| now.saturating_sub(self.set_at[j as usize]) <= reset_ns)
            .fold(0, |live, j| live | 1 << j)
    }

    /// When the next bit is forgotten.
    fn next_expiry(&self, reset_ns: u64) -> Option<u64> {
        self.set()
            .map(|j| self.set_at[j as usize].saturating_add(reset_ns))
            .min()
    }
}

/// One switch's DLR logic: its place in the tree and (adaptive) its re-route
/// vector. The routing tables are implicit (d-mod-k up, digit down) and never
/// change, which is what makes recovery transparent (digest §3.9).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DlrSwitch {
    cfg: DlrConfig,
    id: SwitchId,
    level: u32,
    /// Digits 1..n-1 (`digits[i-1]` = digit i).
    digits: Vec<u32>,
    /// k^level: hosts below one down port.
    below: u64,
    /// The number formed by digits level+1..n-1: host d is in this switch's
    /// subtree iff `d / (k·below) == subtree`.
    subtree: u64,
    vector: RerouteVector,
}

/// Read-only view of one routing call's inputs, so the four algorithms share
/// the port arithmetic.
struct Ctx<'a> {
    k: u32,
    level: u32,
    /// The destination's digit at this switch's level: the down port towards
    /// it, and d-mod-k's up-port index.
    d_level: u32,
    in_port: PortNo,
    port_up: &'a [bool],
}

impl Ctx<'_> {
    fn alive(&self, p: PortNo) -> bool {
        self.port_up.get(p as usize).copied().unwrap_or(false)
    }
    fn arrived_from_above(&self) -> bool {
        self.in_port as u32 >= self.k
    }
    fn is_leaf(&self) -> bool {
        self.level == 0
    }
    fn down_port(&self) -> PortNo {
        self.d_level as PortNo
    }
    fn up(&self, j: u32) -> PortNo {
        (self.k + j) as PortNo
    }
    /// Alive down ports other than `skip`, in cyclic order after `start`
    /// (the deterministic stand-in for the paper's "arbitrary" choices, §8
    /// item 10: "first alive in cyclic order after the blocked port").
    fn other_down(&self, start: PortNo, skip: PortNo) -> impl Iterator<Item = PortNo> + '_ {
        let k = self.k;
        (1..=k)
            .map(move |i| ((start as u32 + i) % k) as PortNo)
            .filter(move |&p| p != skip && self.alive(p))
    }
    /// Alive up ports, d-mod-k's `k + d_ℓ` first, then cyclically.
    fn up_candidates(&self) -> impl Iterator<Item = PortNo> + '_ {
        let k = self.k;
        let first = self.d_level;
        (0..k)
            .map(move |i| self.up((first + i) % k))
            .filter(move |&p| self.alive(p))
    }
}

fn forward(port: PortNo, vc: u8, step: DlrStep) -> DlrDecision {
    DlrDecision::Forward { port, vc, step }
}

fn discard(reason: DiscardReason) -> DlrDecision {
    DlrDecision::Discard { reason }
}

/// Picks the least-loaded candidate, ties (and no load information) going to
/// the earliest in preference order: the adaptive selection function.
fn select(cands: impl Iterator<Item = PortNo>, load: Option<&[u32]>) -> Option<PortNo> {
    let cost = |p: PortNo| load.and_then(|l| l.get(p as usize).copied()).unwrap_or(0);
    let mut best: Option<PortNo> = None;
    for p in cands {
        if best.is_none_or(|b| cost(p) < cost(b)) {
            best = Some(p);
        }
    }
    best
}

impl DlrSwitch {
    /// A switch at `level` (0 = leaves) with digits `1..n-1` in `digits`.
    pub fn new(
        cfg: DlrConfig,
        id: SwitchId,
        level: u32,
        digits: Vec<u32>,
    ) -> Result<Self, DlrError> {
        cfg.validate()?;
        if level >= cfg.n
            || digits.len() != (cfg.n - 1) as usize
            || digits.iter().any(|&x| x >= cfg.k)
        {
            return Err(DlrError::BadSwitch {
                switch: id,
                got: digits.len(),
                k: cfg.k,
                n: cfg.n,
            });
        }
        let k = cfg.k as u64;
        let subtree = digits[level as usize..]
            .iter()
            .rev()
            .fold(0u64, |acc, &x| acc * k + x as u64);
        Ok(DlrSwitch {
            cfg,
            id,
            level,
            digits,
            below: k.pow(level),
            subtree,
            vector: RerouteVector::default(),
        })
    }

    /// The DLR state for switch `id` of a topology built by
    /// [`crate::topology::generators::kary_ntree`].
    pub fn from_topology(cfg: DlrConfig, topo: &Topology, id: SwitchId) -> Result<Self, DlrError> {
        if topo.family != (Family::KaryNTree { k: cfg.k, n: cfg.n }) {
            return Err(DlrError::NotKaryNTree {
                topology: topo.name.clone(),
                k: cfg.k,
                n: cfg.n,
            });
        }
        let sw = topo.switches.get(id as usize).ok_or(DlrError::BadSwitch {
            switch: id,
            got: 0,
            k: cfg.k,
            n: cfg.n,
        })?;
        let level = sw.level.ok_or(DlrError::BadSwitch {
            switch: id,
            got: sw.label.len(),
            k: cfg.k,
            n: cfg.n,
        })?;
        Self::new(cfg, id, level, sw.label.clone())
    }

    pub fn config(&self) -> &DlrConfig {
        &self.cfg
    }
    pub fn id(&self) -> SwitchId {
        self.id
    }
    pub fn level(&self) -> u32 {
        self.level
    }

    /// The adaptive re-route vector as of `now` (bit j = up port k+j is
    /// excluded from U-turns); always 0 for deterministic variants.
    pub fn reroute_vector(&self, now: u64) -> u64 {
        self.vector.at(now, self.cfg.reroute_reset_ns)
    }

    /// When the next bit of the re-route vector is forgotten if no U-turn
    /// through its port comes before, for the caller's timer wheel (`None`
    /// when the vector is empty).
    pub fn poll_timeout(&self) -> Option<u64> {
        self.vector.next_expiry(self.cfg.reroute_reset_ns)
    }

    /// Clears the bits of the re-route vector whose inactivity period has
    /// elapsed.
    pub fn handle_timeout(&mut self, now: u64) {
        self.vector.bits = self.vector.at(now, self.cfg.reroute_reset_ns);
    }

    /// True when the switch's subtree contains host `dst` (no range check).
    pub fn reaches_down(&self, dst: HostId) -> bool {
        dst as u64 / (self.below * self.cfg.k as u64) == self.subtree
    }

    /// The switch's digits 1..n−1 (`digits()[i-1]` = digit i).
    pub fn digits(&self) -> &[u32] {
        &self.digits
    }

    /// The routing decision for a head flit for `dst` that arrived on
    /// `in_port` in VC `in_vc` (a host injecting at a leaf arrives on a down
    /// port in [`NL`]). `port_up[p]` is the local liveness of port p (a dead
    /// neighbour switch shows as a dead port). May update `pkt` (switch
    /// variants' port field) and the adaptive re-route vector.
    pub fn route(
        &mut self,
        now: u64,
        dst: HostId,
        in_port: PortNo,
        in_vc: u8,
        pkt: &mut DlrPacketState,
        port_up: &[bool],
    ) -> Result<DlrDecision, DlrError> {
        self.route_with_load(now, dst, in_port, in_vc, pkt, port_up, None)
    }

    /// [`DlrSwitch::route`] with the adaptive selection function fed by
    /// `load[p]` (e.g. queued flits on port p): adaptive variants pick the
    /// least-loaded allowed port. Deterministic variants ignore it.
    #[allow(clippy::too_many_arguments)]
    pub fn route_with_load(
        &mut self,
        now: u64,
        dst: HostId,
        in_port: PortNo,
        in_vc: u8,
        pkt: &mut DlrPacketState,
        port_up: &[bool],
        load: Option<&[u32]>,
    ) -> Result<DlrDecision, DlrError> {
        let k = self.cfg.k;
        let radix = 2 * k as usize;
        if port_up.len() != radix {
            return Err(DlrError::PortVector {
                switch: self.id,
                got: port_up.len(),
                radix,
            });
        }
        if in_port as usize >= radix {
            return Err(DlrError::BadInPort {
                switch: self.id,
                port: in_port,
                radix,
            });
        }
        let vcs = self.cfg.vcs_needed();
        if in_vc >= vcs {
            return Err(DlrError::BadVc {
                switch: self.id,
                vc: in_vc,
                vcs,
            });
        }
        let hosts = (k as u64).pow(self.cfg.n);
        if dst as u64 >= hosts {
            return Err(DlrError::BadDestination {
                switch: self.id,
                dst,
                hosts,
            });
        }
        if let PortField::ReturnPort(p) = pkt.port_field {
            if p as u32 >= k {
                return Err(DlrError::BadPortField {
                    switch: self.id,
                    port: p,
                    k,
                });
            }
        }
        let cx = Ctx {
            k,
            level: self.level,
            d_level: ((dst as u64 / self.below) % k as u64) as u32,
            in_port,
            port_up,
        };
        let reach = self.reaches_down(dst);
        self.handle_timeout(now);
        Ok(match (self.cfg.variant, self.cfg.faults_handled) {
            (DlrVariant::Deterministic, DlrFaults::Link) => {
                det_link(&cx, reach, in_vc, self.cfg.literal_lca_bounce)
            }
            (DlrVariant::Deterministic, DlrFaults::Switch) => det_switch(&cx, reach, in_vc, pkt),
            (DlrVariant::Adaptive, DlrFaults::Link) => self.adapt_link(&cx, reach, now, load),
            (DlrVariant::Adaptive, DlrFaults::Switch) => {
                self.adapt_switch(&cx, reach, now, pkt, load)
            }
        })
    }

    /// Records a U-turn arrival on up port `in_port` and returns the allowed
    /// up ports' selection (adaptive steps 3–5 of §3.6, 4b/5/7 of §3.7).
    fn adaptive_uturn(&mut self, cx: &Ctx, now: u64, load: Option<&[u32]>) -> DlrDecision {
        let k = cx.k;
        let j = cx.in_port as u32 - k;
        self.vector.bits |= 1u64 << j;
        self.vector.set_at[j as usize] = now;
        let bits = self.vector.bits;
        let cands = cx
            .up_candidates()
            .filter(move |&p| bits & (1u64 << (p as u32 - k)) == 0);
        match select(cands, load) {
            Some(p) => forward(p, NL, DlrStep::Uturn),
            None => discard(DiscardReason::UturnExhausted),
        }
    }

    /// R_adapt^link (digest §3.6), one VC.
    fn adapt_link(&mut self, cx: &Ctx, reach: bool, now: u64, load: Option<&[u32]>) -> DlrDecision {
        if reach {
            return down_phase_1vc(cx, load);
        }
        if !cx.arrived_from_above() {
            // Step 1: fully adaptive up phase.
            return up_phase(cx, NL, load);
        }
        self.adaptive_uturn(cx, now, load)
    }

    /// R_adapt^switch (digest §3.7 with R8), one VC.
    fn adapt_switch(
        &mut self,
        cx: &Ctx,
        reach: bool,
        now: u64,
        pkt: &mut DlrPacketState,
        load: Option<&[u32]>,
    ) -> DlrDecision {
        if reach {
            // Step 3: from below with an alive shortest down link → port −1.
            if !cx.arrived_from_above() && !cx.is_leaf() && cx.alive(cx.down_port()) {
                pkt.port_field = PortField::Clear;
            }
            return down_phase_1vc(cx, load);
        }
        if !cx.arrived_from_above() {
            if pkt.port_field == PortField::UturnNext {
                // Step 6: middle switch above the U-turn switch remembers the
                // way back and climbs.
                pkt.port_field = PortField::ReturnPort(cx.in_port);
                return match select(cx.up_candidates(), load) {
                    Some(p) => forward(p, NL, DlrStep::Climb),
                    None => discard(DiscardReason::NoUpPort),
                };
            }
            return up_phase(cx, NL, load);
        }
        match pkt.port_field {
            PortField::ReturnPort(p) => {
                // Step 4d: back down to the same U-turn switch.
                pkt.port_field = PortField::UturnNext;
                if cx.alive(p) {
                    forward(p, NL, DlrStep::ReturnToUturn)
                } else {
                    discard(DiscardReason::ReturnPathDown)
                }
            }
            PortField::Clear if !cx.is_leaf() => {
                // Step 4a: start a 2-hop reroute one tier further down.
                pkt.port_field = PortField::UturnNext;
                let start = (cx.down_port() + cx.k as PortNo - 1) % cx.k as PortNo;
                match select(cx.other_down(start, PortNo::MAX), load) {
                    Some(p) => forward(p, NL, DlrStep::Misroute),
                    None => discard(DiscardReason::NoDownPort),
                }
            }
            // Step 4b, and 4c at a leaf with port −1 (R8: the field stays as is).
            _ => self.adaptive_uturn(cx, now, load),
        }
    }
}

/// Down phase with one VC (adaptive variants, steps 2a/2b): the unique port,
/// else another down port when from above, else back where it came from.
fn down_phase_1vc(cx: &Ctx, load: Option<&[u32]>) -> DlrDecision {
    let dp = cx.down_port();
    if cx.alive(dp) {
        return forward(dp, NL, DlrStep::Normal);
    }
    if cx.is_leaf() {
        return discard(DiscardReason::HostLinkDown);
    }
    if !cx.arrived_from_above() && cx.alive(cx.in_port) {
        return forward(cx.in_port, NL, DlrStep::Bounce);
    }
    match select(cx.other_down(dp, dp), load) {
        Some(p) => forward(p, NL, DlrStep::Misroute),
        None => discard(DiscardReason::NoDownPort),
    }
}

/// Up phase (step 1): d-mod-k's port, or another alive up port.
fn up_phase(cx: &Ctx, vc: u8, load: Option<&[u32]>) -> DlrDecision {
    let table = cx.up(cx.d_level);
    match select(cx.up_candidates(), load) {
        Some(p) => forward(
            p,
            vc,
            if p == table {
                DlrStep::Normal
            } else {
                DlrStep::UpDetour
            },
        ),
        None => discard(DiscardReason::NoUpPort),
    }
}

/// The deterministic U-turn port: a first U-turn (arrival in NL) takes the
/// first alive port of D other than the arrival port (§3.4 3a, R3); a bounced
/// packet (arrival in a re-routing layer) takes the next alive port of D after
/// the arrival port (3b). Dead ports count as tested (R2).
fn det_uturn_port(cx: &Ctx, first: bool) -> Option<PortNo> {
    let k = cx.k;
    let from = if first { 0 } else { cx.in_port as u32 - k + 1 };
    (from..k)
        .map(|j| cx.up(j))
        .find(|&p| (!first || p != cx.in_port) && cx.alive(p))
}

/// R_det^link, resolved (digest §3.4 pseudo-code, with R1–R3).
fn det_link(cx: &Ctx, reach: bool, vc: u8, literal_lca_bounce: bool) -> DlrDecision {
    let from_above = cx.arrived_from_above();
    if reach {
        let dp = cx.down_port();
        if cx.is_leaf() {
            return if cx.alive(dp) {
                forward(dp, NL, DlrStep::Normal)
            } else {
                discard(DiscardReason::HostLinkDown)
            };
        }
        if cx.alive(dp) {
            // ML from above means this is s, the lower end of the failed
            // link: back to NL. ML from below is the upper switch after a
            // U-turn: stay in ML.
            let out = if vc == ML && from_above { NL } else { vc };
            return forward(dp, out, DlrStep::Normal);
        }
        if vc == ML && !from_above {
            // 2b: bounce to the same U-turn switch, which tries the next port of D.
            return if cx.alive(cx.in_port) {
                forward(cx.in_port, ML, DlrStep::Bounce)
            } else {
                discard(DiscardReason::ReturnPathDown)
            };
        }
        if !from_above && cx.alive(cx.in_port) {
            // R1: an LCA bounce travels in NL, so the lower switch starts a
            // fresh U-turn from the start of D.
            let layer = if literal_lca_bounce { ML } else { NL };
            return forward(cx.in_port, layer, DlrStep::Bounce);
        }
        // 2a: misroute down another port (an ML arrival from above is a
        // fresh fault in the next group and is treated as NL).
        return match cx.other_down(dp, dp).next() {
            Some(p) => forward(p, NL, DlrStep::Misroute),
            None => discard(DiscardReason::NoDownPort),
        };
    }
    if !from_above {
        return up_phase(cx, NL, None);
    }
    // Steps 3–5: U-turn switch.
    match det_uturn_port(cx, vc == NL) {
        Some(p) => forward(p, ML, DlrStep::Uturn),
        None => discard(DiscardReason::UturnExhausted),
    }
}

/// R_det^switch, resolved (digest §3.5 table with R1, R4–R7).
fn det_switch(cx: &Ctx, reach: bool, vc: u8, pkt: &mut DlrPacketState) -> DlrDecision {
    let from_above = cx.arrived_from_above();
    if reach {
        let dp = cx.down_port();
        if cx.is_leaf() {
            return if cx.alive(dp) {
                forward(dp, NL, DlrStep::Normal)
            } else {
                discard(DiscardReason::HostLinkDown)
            };
        }
        if cx.alive(dp) {
            let out = if from_above {
                match vc {
                    ML2 => ML1, // 2b: upper half done, finish in the lower half
                    _ => NL,    // 2c (ML1 → NL at the lower switch), 2d
                }
            } else {
                // 2a: t' after the climb continues down in ML2 and clears the
                // field (R4); ML1 from below is the 1-hop leaf case, which
                // finishes its detour in ML1; NL is the normal LCA turn.
                pkt.port_field = PortField::Clear;
                vc
            };
            return forward(dp, out, DlrStep::Normal);
        }
        if !from_above {
            if vc != NL {
                // 3b: back to the same middle / U-turn switch, in the layer it
                // came in (ML2; ML1 in the 1-hop leaf case, R5).
                return if cx.alive(cx.in_port) {
                    forward(cx.in_port, vc, DlrStep::Bounce)
                } else {
                    discard(DiscardReason::ReturnPathDown)
                };
            }
            // 3b′ (R1): LCA bounce in NL with the field cleared.
            pkt.port_field = PortField::Clear;
            if cx.alive(cx.in_port) {
                return forward(cx.in_port, NL, DlrStep::Bounce);
            }
        }
        // 3a: another alive down port; ML2 → ML1, ML1/NL → NL; field unchanged.
        let out = if vc == ML2 { ML1 } else { NL };
        return match cx.other_down(dp, dp).next() {
            Some(p) => forward(p, out, DlrStep::Misroute),
            None => discard(DiscardReason::NoDownPort),
        };
    }
    if !from_above {
        if pkt.port_field == PortField::UturnNext {
            // 5: the middle switch above the U-turn switch records the way
            // back and climbs in ML2.
            pkt.port_field = PortField::ReturnPort(cx.in_port);
            return match cx.up_candidates().next() {
                Some(p) => forward(p, ML2, DlrStep::Climb),
                None => discard(DiscardReason::NoUpPort),
            };
        }
        return up_phase(cx, NL, None);
    }
    match pkt.port_field {
        PortField::ReturnPort(p) => {
            // 4c: back down to the same U-turn switch.
            pkt.port_field = PortField::UturnNext;
            if cx.alive(p) {
                forward(p, ML1, DlrStep::ReturnToUturn)
            } else {
                discard(DiscardReason::ReturnPathDown)
            }
        }
        PortField::Clear if !cx.is_leaf() => {
            // 4a (R6): reroute one more tier down; the next switch is the U-turn.
            pkt.port_field = PortField::UturnNext;
            let start = (cx.down_port() + cx.k as PortNo - 1) % cx.k as PortNo;
            match cx.other_down(start, PortNo::MAX).next() {
                Some(p) => forward(p, NL, DlrStep::Misroute),
                None => discard(DiscardReason::NoDownPort),
            }
        }
        // 4b: U-turn (port −2, or port −1 at a leaf), in ML1 (R7).
        _ => match det_uturn_port(cx, vc == NL) {
            Some(p) => forward(p, ML1, DlrStep::Uturn),
            None => discard(DiscardReason::UturnExhausted),
        },
    }
}
