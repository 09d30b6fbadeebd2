//! Application profiles a diagnosis can take its target from (NPAD/pathdiag's
//! target, named by the application instead of in bits per second): the video
//! encodings of Rufini et al. (Fotonica 2014) at their bitrates, and the gigabit
//! tele-therapy app of Bazan-Antequera et al. (Kinect RGB, depth, skeletal and audio
//! streams, about 200 Mbit/s at peak).

use vantage_model::diagnosis::DiagnoseRequest;

use crate::qoe;

/// What an application needs of the path.
#[derive(Debug, Clone, PartialEq)]
pub struct AppProfile {
    pub name: &'static str,
    pub rate_bps: u64,
    /// The round-trip time it tolerates, when its source states one.
    pub rtt_us: Option<u64>,
    pub description: &'static str,
}

/// The gigabit tele-therapy app's peak (Bazan-Antequera et al.).
const PTAAS_KINECT: AppProfile = AppProfile {
    name: "ptaas-kinect",
    rate_bps: 200_000_000,
    rtt_us: None,
    description: "PhysicalTherapy-as-a-Service Kinect streams, 200 Mbit/s peak",
};

/// Every profile: the video encodings first, then the gigabit app.
pub fn profiles() -> Vec<AppProfile> {
    qoe::PROFILES
        .iter()
        .map(|video| AppProfile {
            name: video.name,
            rate_bps: video.bitrate_bps as u64,
            rtt_us: None,
            description: video.description,
        })
        .chain([PTAAS_KINECT])
        .collect()
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("unknown application profile '{name}' (known: {known})")]
pub struct UnknownApp {
    pub name: String,
    pub known: String,
}

/// The profile named `name`.
pub fn profile(name: &str) -> Result<AppProfile, UnknownApp> {
    let all = profiles();
    all.iter()
        .find(|profile| profile.name == name)
        .cloned()
        .ok_or_else(|| UnknownApp {
            name: name.to_string(),
            known: all
                .iter()
                .map(|profile| profile.name)
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// Fills the request's target from its `app`, leaving explicit figures as given.
pub fn apply(request: &mut DiagnoseRequest) -> Result<(), UnknownApp> {
    if let Some(name) = &request.app {
        let app = profile(name)?;
        request.target_rate_bps = request.target_rate_bps.or(Some(app.rate_bps));
        request.target_rtt_us = request.target_rtt_us.or(app.rtt_us);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(app: Option<&str>, rate: Option<u64>) -> DiagnoseRequest {
        DiagnoseRequest {
            source: "a".into(),
            destination: "b".into(),
            target_rate_bps: rate,
            target_rtt_us: None,
            app: app.map(str::to_string),
            segments: true,
        }
    }

    #[test]
    fn a_profile_fills_the_target_and_explicit_figures_win() {
        let mut video = request(Some("youtube-1080p"), None);
        apply(&mut video).unwrap();
        assert_eq!(video.target_rate_bps, Some(8_000_000));
        let mut kinect = request(Some("ptaas-kinect"), None);
        apply(&mut kinect).unwrap();
        assert_eq!(kinect.target_rate_bps, Some(200_000_000));
        let mut explicit = request(Some("mpeg2-720p"), Some(25_000_000));
        apply(&mut explicit).unwrap();
        assert_eq!(explicit.target_rate_bps, Some(25_000_000));
        let mut none = request(None, None);
        apply(&mut none).unwrap();
        assert_eq!(none.target_rate_bps, None);
    }

    #[test]
    fn an_unknown_profile_lists_the_known_ones() {
        let error = apply(&mut request(Some("4k"), None)).unwrap_err();
        assert_eq!(
            error.to_string(),
            "unknown application profile '4k' (known: youtube-360p, youtube-480p, \
             youtube-720p, youtube-1080p, h264-1080p, mpeg2-720p, ptaas-kinect)"
        );
    }
}
