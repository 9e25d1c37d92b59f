//! Which output VC a packet takes under a [`VcPolicy`]: a pure function of
//! the policy the engine installed, shared by the switch's VC allocation
//! and the checker's deadlock analysis.

use super::VcPolicy;

/// The output VC for a packet arriving on `in_vc` of `in_port` and leaving
/// by `out_port`. With `Dateline`, VCs come in pairs (`base` = the even VC of
/// the pair): entering a new dimension (or the fabric) resets to `base`,
/// leaving through a dateline port moves to `base + 1` (Dally–Seitz).
pub fn output_vc(policy: &VcPolicy, in_port: usize, in_vc: u8, out_port: usize) -> u8 {
    match policy {
        VcPolicy::Keep => in_vc,
        // The escape VC; the switch picks adaptive VCs itself.
        VcPolicy::LocalReroute => 0,
        VcPolicy::Dateline { port_dim, dateline } => {
            let dim = |p: usize| port_dim.get(p).copied().flatten();
            let base = in_vc & !1;
            let in_dim = dim(in_port);
            let out_dim = dim(out_port);
            let mut vc = if in_dim.is_none() || in_dim != out_dim {
                base
            } else {
                in_vc
            };
            if dateline.get(out_port).copied().unwrap_or(false) {
                vc = base + 1;
            }
            vc
        }
        // The escape VC of leg 0; the switch picks per leg with
        // [`leg_escape_vc`] (this arm serves callers without a head).
        VcPolicy::Legs {
            escape_per_leg,
            port_dim,
            dateline,
            ..
        } => leg_escape_vc(
            *escape_per_leg,
            port_dim,
            dateline,
            0,
            in_port,
            in_vc,
            out_port,
        ),
    }
}

/// The escape VC of leg `leg` under [`VcPolicy::Legs`] (seed 004 §3.2, §3.9):
/// the leg's own set starts at `leg · escape_per_leg`. With a dateline pair
/// (tori) a packet keeps its VC while it stays in one ring *on this leg's
/// escape set*; entering a new dimension, arriving from an adaptive VC or
/// from the previous leg's set (the intermediate node) starts at the base
/// VC, and leaving through a wrap-around port moves to `base + 1`.
pub fn leg_escape_vc(
    escape_per_leg: u8,
    port_dim: &[Option<u8>],
    dateline: &[bool],
    leg: u8,
    in_port: usize,
    in_vc: u8,
    out_port: usize,
) -> u8 {
    let base = leg * escape_per_leg;
    if escape_per_leg < 2 {
        return base;
    }
    let dim = |p: usize| port_dim.get(p).copied().flatten();
    let on_this_leg = in_vc >= base && in_vc < base + escape_per_leg;
    let same_ring = dim(in_port).is_some() && dim(in_port) == dim(out_port);
    let mut vc = if on_this_leg && same_ring {
        in_vc
    } else {
        base
    };
    if dateline.get(out_port).copied().unwrap_or(false) {
        vc = base + 1;
    }
    vc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dateline_moves_to_the_upper_vc_on_the_wrap_link() {
        // Ports 0,1: dimension 0 (port 1 is the wrap link); port 2: host.
        let p = VcPolicy::Dateline {
            port_dim: vec![Some(0), Some(0), None],
            dateline: vec![false, true, false],
        };
        assert_eq!(output_vc(&p, 2, 0, 0), 0, "injection: base VC");
        assert_eq!(output_vc(&p, 0, 0, 1), 1, "crossing the dateline");
        assert_eq!(output_vc(&p, 0, 1, 0), 1, "same ring: keeps VC 1");
        assert_eq!(output_vc(&p, 0, 1, 2), 0, "ejection: base VC");
        assert_eq!(output_vc(&VcPolicy::Keep, 0, 1, 2), 1);
    }

    #[test]
    fn each_leg_has_its_own_escape_set_with_its_own_dateline() {
        // Ports 0,1: dimension 0 (port 1 wraps); 2: dimension 1; 3: host.
        let (dims, wrap) = (
            vec![Some(0), Some(0), Some(1), None],
            vec![false, true, false, false],
        );
        let esc =
            |leg, in_port, in_vc, out| leg_escape_vc(2, &dims, &wrap, leg, in_port, in_vc, out);
        assert_eq!(esc(0, 3, 0, 0), 0, "injection: leg 0 base");
        assert_eq!(
            esc(1, 0, 1, 0),
            2,
            "leg 1 starts at its own base, not the old VC"
        );
        assert_eq!(esc(1, 0, 2, 1), 3, "leg 1 crossing its dateline");
        assert_eq!(
            esc(1, 0, 3, 0),
            3,
            "same ring, same leg: keeps the upper VC"
        );
        assert_eq!(esc(1, 0, 3, 2), 2, "new dimension: back to the base");
        assert_eq!(esc(2, 0, 6, 0), 4, "from an adaptive VC (6): base of leg 2");
        // Meshes: one escape VC per leg.
        assert_eq!(leg_escape_vc(1, &dims, &[false; 4], 2, 0, 5, 1), 2);
    }
}
