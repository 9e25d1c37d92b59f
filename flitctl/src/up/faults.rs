//! `up`'s fault flags, read once for the live run and the simulated one:
//! what to kill, and the combinations `up` cannot express (one fault instant,
//! `--kill-at`), each refused with what to use instead.

use super::{Recovery, UpArgs};
use crate::parse::{parse_link, parse_switch_port};
use anyhow::{bail, Result};
use flitnet_core::topology::{LinkId, NodeRef, PortRef, SwitchId, Topology};
use std::time::Duration;

/// The elements `up`'s flags act on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UpFaults {
    /// `--kill-link`, all at `--kill-at`.
    pub kill_links: Vec<LinkId>,
    /// `--kill-switch`, `--kill-every` apart from `--kill-at`.
    pub kill_switches: Vec<SwitchId>,
    /// `--withhold-credits`.
    pub withhold: Option<PortRef>,
    /// `--stop-switch`: the switches, when, for how long.
    pub stops: Option<Stops>,
}

/// Switches stopped together with their state kept (`--stop-switch`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stops {
    pub switches: Vec<SwitchId>,
    /// After traffic starts.
    pub at: Duration,
    pub lasts: Duration,
}

impl UpFaults {
    /// Reads and checks the fault flags of `args` against `topo`.
    pub fn of(args: &UpArgs, topo: &Topology) -> Result<UpFaults> {
        let kill_links = args
            .kill_link
            .iter()
            .map(|s| parse_link(topo, s))
            .collect::<Result<Vec<_>>>()?;
        let withhold = args
            .withhold_credits
            .as_deref()
            .map(|spec| parse_switch_port(topo, spec))
            .transpose()?;
        let kill_switches = switches_named(topo, "--kill-switch", &args.kill_switch)?;
        if let Some(twice) = kill_switches
            .iter()
            .enumerate()
            .find(|(i, s)| kill_switches[..*i].contains(s))
            .map(|(i, _)| &args.kill_switch[i])
        {
            if args.restart_after.is_none() {
                bail!(
                    "--kill-switch {twice} twice: a killed switch stays dead (unless --restart-after)"
                );
            }
        }
        if let Some(after) = args.restart_after {
            if kill_switches.is_empty() {
                bail!("--restart-after restarts killed switches: it needs --kill-switch");
            }
            if kill_switches.len() > 1 && after >= args.kill_every {
                bail!("--restart-after must be less than --kill-every (a switch is back before the next kill)");
            }
            if args.recovery == Recovery::Reroute {
                bail!(
                    "--restart-after with --recovery reroute: `up` does not re-route back after a \
                     restart; use --recovery none (faithful mode) or a chaos scenario \
                     (restart-switch)"
                );
            }
        }
        if kill_switches.len() > 1 && args.kill_every.is_zero() {
            bail!("several --kill-switch: say how far apart with --kill-every");
        }
        if args.notify_neighbours && kill_switches.is_empty() {
            bail!("--notify-neighbours tells a killed switch's neighbours: it needs --kill-switch");
        }
        if !kill_links.is_empty() && !kill_switches.is_empty() {
            // One fault instant (`--kill-at`): the switch would be ignored.
            bail!(
                "--kill-link and --kill-switch together: `up` applies its faults at one instant \
                 (--kill-at) and kills either links or a switch; to kill a link and then a switch \
                 in one run, use a chaos scenario (flitctl chaos or flitctl sim, docs/chaos.md, \
                 e.g. topologies/scenarios/kary-4-3-dlr-sbrp2.yaml)"
            );
        }
        let stops = Stops::of(args, topo)?;
        Ok(UpFaults {
            kill_links,
            kill_switches,
            withhold,
            stops,
        })
    }

    /// The first switch killed, if any.
    pub fn kill_switch(&self) -> Option<SwitchId> {
        self.kill_switches.first().copied()
    }
}

impl Stops {
    /// `--stop-switch`, `--stop-at` and `--stop-for`, checked.
    fn of(args: &UpArgs, topo: &Topology) -> Result<Option<Stops>> {
        if args.stop_switch.is_empty() {
            if args.stop_at.is_some() || args.stop_for.is_some() {
                bail!("--stop-at and --stop-for say when and how long --stop-switch stops a switch: it needs --stop-switch");
            }
            return Ok(None);
        }
        let switches = switches_named(topo, "--stop-switch", &args.stop_switch)?;
        if let Some(i) = (0..switches.len()).find(|&i| switches[..i].contains(&switches[i])) {
            bail!("--stop-switch {} twice", args.stop_switch[i]);
        }
        let Some(lasts) = args.stop_for.filter(|d| !d.is_zero()) else {
            bail!("--stop-switch needs --stop-for, a positive duration (how long the switch stays stopped)");
        };
        let at = args.stop_at.unwrap_or(args.kill_at);
        if at >= args.traffic.duration {
            bail!(
                "--stop-at {at:?} is not within the traffic duration {:?}",
                args.traffic.duration
            );
        }
        Ok(Some(Stops {
            switches,
            at,
            lasts,
        }))
    }
}

/// The switches `names` (given with `flag`) name, in order.
fn switches_named(topo: &Topology, flag: &str, names: &[String]) -> Result<Vec<SwitchId>> {
    names
        .iter()
        .map(|name| match topo.find_node(name) {
            Some(NodeRef::Switch(s)) => Ok(s),
            Some(_) => bail!("{flag} {name}: that is a host, not a switch"),
            None => bail!("{flag} {name}: no such switch"),
        })
        .collect()
}
