//! The controller's half of the registered mechanisms: a mechanism is
//! selected by its one spelling in core's registry
//! ([`flitnet_core::mechanism::REGISTRY`]), and each folder here holds
//! what the controller configures, pushes or reports for it.

pub mod dlr;
pub mod ft2ei_dyn;
pub mod intermediate;

use anyhow::{bail, Result};
use flitnet_core::mechanism::dlr::DlrConfig;
use flitnet_core::mechanism::ft2ei_dyn::Ft2eiDynConfig;
use flitnet_core::mechanism::intermediate::Mechanisms;
use flitnet_core::mechanism::sbrp::RecoveryProtocol;
use flitnet_core::mechanism::{self as registry, Variant};
use flitnet_core::topology::{Family, Topology};

/// A fabric mechanism as `--mechanism` and scenario files select it: a
/// registered variant (`dlr-link`, `ft2ei-dyn`, `i-d`, `sbrp1`, …) or
/// `none`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Mechanism(Option<&'static Variant>);

impl Mechanism {
    /// No mechanism: packets routed to a dead port are dropped.
    pub const NONE: Mechanism = Mechanism(None);

    /// `none` or a registered variant's name.
    pub fn parse(name: &str) -> Result<Self, String> {
        if name == "none" {
            return Ok(Mechanism::NONE);
        }
        registry::parse(name)
            .map(|v| Mechanism(Some(v)))
            .ok_or_else(|| {
                format!(
                    "unknown mechanism `{name}` (known: none, {})",
                    registry::variants()
                        .map(|v| v.name)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
    }

    /// A switch or host mechanism for `--mechanism` (`up`, `attach`): the
    /// recovery protocols have their own option.
    pub fn parse_fabric(name: &str) -> Result<Self, String> {
        let m = Mechanism::parse(name)?;
        if m.recovery_protocol().is_on() {
            return Err(format!(
                "`{name}` is a recovery protocol: select it with --recovery-protocol {name}"
            ));
        }
        Ok(m)
    }

    /// Its one spelling.
    pub fn name(self) -> &'static str {
        self.0.map_or("none", |v| v.name)
    }

    /// The registered variant, unless `none`.
    pub fn variant(self) -> Option<&'static Variant> {
        self.0
    }

    /// Whether it is a variant of the registered mechanism `mechanism`.
    pub fn is_of(self, mechanism: &str) -> bool {
        self.0.is_some_and(|v| v.mechanism == mechanism)
    }

    /// The intermediate-node mechanism set (*A Routing Methodology for
    /// Achieving Fault Tolerance in Direct Networks*), for its variants.
    pub fn intermediate(self) -> Option<Mechanisms> {
        self.0.and_then(Mechanisms::of_variant)
    }

    /// The recovery protocol it selects (the SBRP levels only).
    pub fn recovery_protocol(self) -> RecoveryProtocol {
        self.0
            .filter(|v| v.mechanism == flitnet_core::mechanism::sbrp::NAME)
            .and_then(|v| RecoveryProtocol::parse(v.name))
            .unwrap_or(RecoveryProtocol::None)
    }

    /// One of the dynamic local rerouting variants.
    pub fn is_dlr(self) -> bool {
        self.is_of(flitnet_core::mechanism::dlr::NAME)
    }

    /// The dynamic local rerouting configuration for `topo` (DLR variants
    /// only); refuses a topology that is not a k-ary n-tree.
    pub fn dlr(self, topo: &Topology) -> Result<Option<DlrConfig>> {
        let Some(v) = self.0 else { return Ok(None) };
        Ok(DlrConfig::of_variant(v, topo)?)
    }

    /// The dynamic FT²EI configuration for `topo` (its variants only);
    /// refuses a topology that is neither a k-ary n-tree nor a RUFT.
    pub fn ft2ei_dyn(self, topo: &Topology) -> Result<Option<Ft2eiDynConfig>> {
        let Some(v) = self
            .0
            .filter(|v| v.mechanism == flitnet_core::mechanism::ft2ei_dyn::NAME)
        else {
            return Ok(None);
        };
        let (k, n, ruft) = match topo.family {
            Family::KaryNTree { k, n } => (k, n, false),
            Family::Ruft { k, n } => (k, n, true),
            _ => bail!(
                "mechanism `{}` needs a k-ary n-tree or a RUFT, `{}` is neither",
                v.name,
                topo.name
            ),
        };
        Ok(Ft2eiDynConfig::of_variant(v, k, n).map(|c| Ft2eiDynConfig { ruft, ..c }))
    }

    /// Whether `topo` with `vcs` virtual channels can run it.
    pub fn check(self, topo: &Topology, vcs: u8) -> Result<()> {
        if let Some(v) = self.0 {
            v.check(topo, vcs)?;
        }
        Ok(())
    }
}

impl std::fmt::Display for Mechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for Mechanism {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Mechanism::parse(&name).map_err(serde::de::Error::custom)
    }
}

impl serde::Serialize for Mechanism {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_registered_variant_parses_by_its_name_and_prints_it_back() {
        for v in registry::variants() {
            let m = Mechanism::parse(v.name).unwrap();
            assert_eq!(m.name(), v.name);
            assert_eq!(m.to_string(), v.name);
        }
        assert_eq!(Mechanism::parse("none").unwrap(), Mechanism::NONE);
        let err = Mechanism::parse("I+D").unwrap_err();
        assert!(
            err.contains("unknown mechanism `I+D`") && err.contains("i-d"),
            "{err}"
        );
    }

    #[test]
    fn recovery_protocols_are_refused_where_they_have_their_own_option() {
        assert_eq!(
            Mechanism::parse("sbrp2").unwrap().recovery_protocol(),
            RecoveryProtocol::Sbrp2
        );
        let err = Mechanism::parse_fabric("sbrp1").unwrap_err();
        assert!(err.contains("--recovery-protocol sbrp1"), "{err}");
        assert!(Mechanism::parse_fabric("dlr-link").unwrap().is_dlr());
    }

    #[test]
    fn intermediate_variants_give_their_mechanism_set() {
        let m = Mechanism::parse("ix2-d").unwrap();
        assert_eq!(m.intermediate(), Some(Mechanisms::i_x2_d()));
        assert!(Mechanism::parse("dlr").unwrap().intermediate().is_none());
    }
}
