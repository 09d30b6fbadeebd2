//! An interface address with its prefix length (`10.77.0.1/24`, `fd77:0:0:1::2/64`).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct IfAddr {
    pub addr: IpAddr,
    pub prefix_len: u8,
}

impl IfAddr {
    pub fn new(addr: IpAddr, prefix_len: u8) -> Self {
        Self { addr, prefix_len }
    }

    /// The subnet this address is in, with host bits cleared.
    pub fn network(&self) -> IfAddr {
        let addr = match self.addr {
            IpAddr::V4(v4) => {
                let mask = u32::MAX
                    .checked_shl(32 - self.prefix_len as u32)
                    .unwrap_or(0);
                IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask))
            }
            IpAddr::V6(v6) => {
                let mask = u128::MAX
                    .checked_shl(128 - self.prefix_len as u32)
                    .unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask))
            }
        };
        IfAddr::new(addr, self.prefix_len)
    }

    pub fn is_ipv6(&self) -> bool {
        self.addr.is_ipv6()
    }
}

impl fmt::Display for IfAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix_len)
    }
}

impl FromStr for IfAddr {
    type Err = String;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let (addr, prefix) = input
            .split_once('/')
            .ok_or_else(|| format!("\"{input}\" needs a prefix length (e.g. 10.0.0.1/24)"))?;
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("\"{input}\": \"{addr}\" is not an IP address"))?;
        let max_prefix = if addr.is_ipv4() { 32 } else { 128 };
        let prefix_len: u8 = prefix
            .parse()
            .ok()
            .filter(|p| *p <= max_prefix)
            .ok_or_else(|| format!("\"{input}\": prefix length must be 0..={max_prefix}"))?;
        Ok(IfAddr::new(addr, prefix_len))
    }
}

impl TryFrom<String> for IfAddr {
    type Error = String;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        value.parse()
    }
}

impl From<IfAddr> for String {
    fn from(value: IfAddr) -> Self {
        value.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_displays_and_masks() {
        let v4: IfAddr = "10.77.3.2/24".parse().unwrap();
        assert_eq!(v4.network().to_string(), "10.77.3.0/24");
        let v6: IfAddr = "fd77:0:0:3::2/64".parse().unwrap();
        assert_eq!(v6.network().to_string(), "fd77:0:0:3::/64");
        assert!("10.0.0.1"
            .parse::<IfAddr>()
            .unwrap_err()
            .contains("prefix length"));
        assert!("10.0.0.1/33".parse::<IfAddr>().is_err());
        assert!("ten/8".parse::<IfAddr>().unwrap_err().contains("not an IP"));
    }
}
