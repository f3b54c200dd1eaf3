//! The portal's own look (README.md, "Branding"), prepared once at start from `[portal]`:
//! `/assets/theme.css` (the accent and the shades derived from it, as CSS custom properties
//! that `app.css` uses), `/assets/logo` (the image, read once) and the brand that
//! `GET /v1/session` names. No inline style or markup reaches a page: the pages link the
//! stylesheet and the shell sets the brand as text.

use bytes::Bytes;

use super::pages::Prepared;
use crate::config::look::{contrast, parse_hex_colour, read_logo};
use crate::config::{ConfigError, Portal};

/// What start-up read of `[portal]`'s look.
pub struct Look {
    pub brand: String,
    pub theme: Prepared,
    pub logo: Option<Prepared>,
}

impl Look {
    /// The stylesheet from `portal.accent` and the logo from `portal.logo_file` (`check-config`
    /// has checked both; a logo that became unreadable since is an error here too).
    pub fn load(portal: &Portal) -> Result<Look, ConfigError> {
        let accent = match &portal.accent {
            None => None,
            Some(a) => Some(parse_hex_colour(a).ok_or_else(|| ConfigError {
                key: "portal.accent".into(),
                message: format!("{a:?} is not a colour written #RRGGBB"),
            })?),
        };
        let css = theme_css(accent);
        let logo = match &portal.logo_file {
            None => None,
            Some(path) => {
                let (kind, bytes) = read_logo(path).map_err(|message| ConfigError {
                    key: "portal.logo_file".into(),
                    message,
                })?;
                let svg = kind == crate::config::look::LogoKind::Svg;
                Some(Prepared::new(kind.content_type(), Bytes::from(bytes), svg))
            }
        };
        Ok(Look {
            brand: portal.brand.clone(),
            theme: Prepared::new("text/css; charset=utf-8", Bytes::from(css), true),
            logo,
        })
    }
}

/// herald's own accent (as in `app.css`): light, then dark.
const HERALD: Shades = Shades {
    light: ["#2f5bd3", "#ffffff", "#e5ecfc"],
    dark: ["#7ea2ff", "#0b1020", "#1d2a4a"],
};
/// `app.css`'s surfaces the accent sits on: white, and the dark scheme's card.
const LIGHT_SURFACE: [u8; 3] = [0xff, 0xff, 0xff];
const DARK_SURFACE: [u8; 3] = [0x17, 0x1b, 0x22];
const DARK_TEXT: [u8; 3] = [0x0b, 0x10, 0x20];

/// `--accent`, `--accent-text` and `--accent-soft` for each scheme.
struct Shades {
    light: [&'static str; 3],
    dark: [&'static str; 3],
}

/// The stylesheet: herald's own colours without an accent; with one, the accent for the light
/// scheme (white text on it, checked at 4.5:1), a lighter shade of it for the dark scheme (mixed
/// with white until it reads at 4.5:1 on the dark card and under dark text), and a soft tint of
/// each for selected rows.
pub fn theme_css(accent: Option<[u8; 3]>) -> String {
    let (light, dark, why) = match accent {
        None => (
            HERALD.light.map(String::from),
            HERALD.dark.map(String::from),
            "herald's own colours (portal.accent is not set)".to_string(),
        ),
        Some(rgb) => {
            let on_dark = lighten_until_readable(rgb);
            (
                [
                    hex(rgb),
                    "#ffffff".into(),
                    hex(mix(rgb, LIGHT_SURFACE, 0.12)),
                ],
                [
                    hex(on_dark),
                    hex(DARK_TEXT),
                    hex(mix(on_dark, DARK_SURFACE, 0.22)),
                ],
                format!("portal.accent = \"{}\"", hex(rgb)),
            )
        }
    };
    let vars = |s: &[String; 3], indent: &str| {
        format!(
            "{indent}--accent: {};\n{indent}--accent-text: {};\n{indent}--accent-soft: {};\n",
            s[0], s[1], s[2]
        )
    };
    format!(
        "/* herald's theme: {why}. Generated at start; app.css uses these. */\n\
         :root {{\n{}}}\n\
         @media (prefers-color-scheme: dark) {{\n  :root {{\n{}  }}\n}}\n",
        vars(&light, "  "),
        vars(&dark, "    "),
    )
}

/// `fg` mixed into `bg`: `share` of `fg`, the rest `bg`.
fn mix(fg: [u8; 3], bg: [u8; 3], share: f64) -> [u8; 3] {
    let ch = |i: usize| {
        (f64::from(fg[i]) * share + f64::from(bg[i]) * (1.0 - share))
            .round()
            .clamp(0.0, 255.0) as u8
    };
    [ch(0), ch(1), ch(2)]
}

/// The accent mixed with white in 5 % steps until it reads at 4.5:1 on the dark card and under
/// the dark scheme's button text (white itself always does).
fn lighten_until_readable(rgb: [u8; 3]) -> [u8; 3] {
    (0..=20)
        .map(|step| mix([255, 255, 255], rgb, f64::from(step) * 0.05))
        .find(|c| contrast(*c, DARK_SURFACE) >= 4.5 && contrast(*c, DARK_TEXT) >= 4.5)
        .unwrap_or([255, 255, 255])
}

fn hex(rgb: [u8; 3]) -> String {
    format!("#{:02x}{:02x}{:02x}", rgb[0], rgb[1], rgb[2])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_an_accent_the_theme_is_heralds_own() {
        let css = theme_css(None);
        assert!(css.contains("--accent: #2f5bd3;"), "{css}");
        assert!(css.contains("--accent: #7ea2ff;"), "{css}");
        // The same values app.css starts with.
        let app = include_str!("../../assets/app.css");
        for v in HERALD.light.iter().chain(HERALD.dark.iter()) {
            assert!(app.contains(v), "{v} is not app.css's");
        }
    }

    #[test]
    fn an_accent_gives_readable_shades_for_both_schemes() {
        for accent in [[0x0b, 0x7a, 0x53], [0x8b, 0x1e, 0x3f], [0x00, 0x00, 0x00]] {
            let css = theme_css(Some(accent));
            assert!(
                css.contains(&format!("--accent: {};", hex(accent))),
                "{css}"
            );
            let dark = lighten_until_readable(accent);
            assert!(contrast(dark, DARK_SURFACE) >= 4.5, "{}", hex(dark));
            assert!(contrast(dark, DARK_TEXT) >= 4.5, "{}", hex(dark));
            assert!(css.contains(&format!("--accent: {};", hex(dark))), "{css}");
        }
        // No markup can come through: the stylesheet holds only colours herald wrote.
        let css = theme_css(Some([1, 2, 3]));
        assert!(!css.contains('<') && !css.contains("url("), "{css}");
    }
}
