//! The portal's own look (README.md, "Branding"): `portal.brand`, `portal.accent` and
//! `portal.logo_file`, checked here and read by start-up through [`read_logo`].
//!
//! The accent fills buttons under white text, so it must keep white text readable: its WCAG 2
//! contrast ratio with white is at least [`MIN_CONTRAST`]. The logo is a PNG or an SVG of at
//! most [`MAX_LOGO_BYTES`], judged by its bytes (the PNG signature, an `<svg` root), never by
//! its file name: the pages show it as an image and nothing else.

use std::path::Path;

use super::Config;

/// WCAG 2's AA contrast for body text.
pub const MIN_CONTRAST: f64 = 4.5;
/// A logo is a small header image; the pages' whole budget is 300 KB.
pub const MAX_LOGO_BYTES: u64 = 64 * 1024;
/// The longest brand: a product name in a header, not a sentence.
pub const MAX_BRAND_CHARS: usize = 60;

/// What a logo file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogoKind {
    Png,
    Svg,
}

impl LogoKind {
    pub fn content_type(self) -> &'static str {
        match self {
            LogoKind::Png => "image/png",
            LogoKind::Svg => "image/svg+xml",
        }
    }
}

/// `#RRGGBB` as its three channels.
pub fn parse_hex_colour(s: &str) -> Option<[u8; 3]> {
    let hex = s.strip_prefix('#')?;
    if hex.len() != 6 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let channel = |i: usize| u8::from_str_radix(&hex[i..i + 2], 16).ok();
    Some([channel(0)?, channel(2)?, channel(4)?])
}

/// WCAG 2's relative luminance of an sRGB colour (0 for black, 1 for white).
pub fn relative_luminance(rgb: [u8; 3]) -> f64 {
    let linear = |c: u8| {
        let c = f64::from(c) / 255.0;
        if c <= 0.04045 {
            c / 12.92
        } else {
            ((c + 0.055) / 1.055).powf(2.4)
        }
    };
    0.2126 * linear(rgb[0]) + 0.7152 * linear(rgb[1]) + 0.0722 * linear(rgb[2])
}

/// WCAG 2's contrast ratio of two colours, from 1 (the same) to 21 (black on white).
pub fn contrast(a: [u8; 3], b: [u8; 3]) -> f64 {
    let (la, lb) = (relative_luminance(a), relative_luminance(b));
    (la.max(lb) + 0.05) / (la.min(lb) + 0.05)
}

/// The kind of image `bytes` hold: the PNG signature, or an SVG document (an optional byte
/// order mark, XML declaration, comments and doctype, then an `<svg` root element).
pub fn logo_kind(bytes: &[u8]) -> Option<LogoKind> {
    const PNG: &[u8] = b"\x89PNG\r\n\x1a\n";
    if bytes.starts_with(PNG) {
        return Some(LogoKind::Png);
    }
    let text = std::str::from_utf8(bytes).ok()?;
    let mut rest = text.strip_prefix('\u{feff}').unwrap_or(text);
    loop {
        rest = rest.trim_start();
        let skip_to = |rest: &str, open: &str, close: &str| -> Option<usize> {
            rest.starts_with(open)
                .then(|| rest.find(close).map(|i| i + close.len()))?
        };
        if let Some(end) = skip_to(rest, "<?xml", "?>")
            .or_else(|| skip_to(rest, "<!--", "-->"))
            .or_else(|| skip_to(rest, "<!DOCTYPE", ">"))
        {
            rest = &rest[end..];
            continue;
        }
        break;
    }
    let after = rest.strip_prefix("<svg")?;
    let root = after
        .chars()
        .next()
        .is_some_and(|c| c.is_whitespace() || c == '>' || c == '/');
    root.then_some(LogoKind::Svg)
}

/// Reads and checks a logo file: at most [`MAX_LOGO_BYTES`], a PNG or an SVG.
pub fn read_logo(path: &Path) -> Result<(LogoKind, Vec<u8>), String> {
    let meta =
        std::fs::metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("{} is not a file", path.display()));
    }
    if meta.len() > MAX_LOGO_BYTES {
        return Err(format!(
            "{} is {} bytes; a logo may be at most {MAX_LOGO_BYTES} bytes (64 KiB)",
            path.display(),
            meta.len()
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    // Read whole, checked again: the file may have grown since its metadata was read.
    if bytes.len() as u64 > MAX_LOGO_BYTES {
        return Err(format!(
            "{} is over {MAX_LOGO_BYTES} bytes (64 KiB)",
            path.display()
        ));
    }
    let kind = logo_kind(&bytes).ok_or_else(|| {
        format!(
            "{} is neither a PNG (its signature) nor an SVG (an <svg> root element); give a \
             PNG or SVG image",
            path.display()
        )
    })?;
    Ok((kind, bytes))
}

impl Config {
    /// `[portal]`'s look: the brand, the accent and the logo file.
    pub(super) fn check_look(&self, err: &mut impl FnMut(&str, String)) {
        let brand = &self.portal.brand;
        if brand.trim().is_empty()
            || brand.trim() != brand
            || brand.chars().count() > MAX_BRAND_CHARS
            || brand.chars().any(char::is_control)
        {
            err(
                "portal.brand",
                format!(
                    "{brand:?} is not a name to show: 1 to {MAX_BRAND_CHARS} characters, no \
                     surrounding spaces or control characters"
                ),
            );
        }
        if let Some(accent) = &self.portal.accent {
            match parse_hex_colour(accent) {
                None => err(
                    "portal.accent",
                    format!("{accent:?} is not a colour written #RRGGBB, such as \"#1a5fb4\""),
                ),
                Some(rgb) => {
                    let ratio = contrast(rgb, [255, 255, 255]);
                    if ratio < MIN_CONTRAST {
                        err(
                            "portal.accent",
                            format!(
                                "{accent:?} has a contrast ratio of {ratio:.2}:1 with white \
                                 text; buttons need at least {MIN_CONTRAST}:1 (WCAG AA), so \
                                 pick a darker colour"
                            ),
                        );
                    }
                }
            }
        }
        if let Some(path) = &self.portal.logo_file {
            if let Err(why) = read_logo(path) {
                err("portal.logo_file", why);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::problems;

    #[test]
    fn contrast_follows_wcag() {
        assert!((contrast([0, 0, 0], [255, 255, 255]) - 21.0).abs() < 1e-9);
        assert!((contrast([255, 255, 255], [255, 255, 255]) - 1.0).abs() < 1e-9);
        // Known figures: #767676 is the lightest grey with 4.5:1 on white; herald's accent.
        assert!((contrast([0x76, 0x76, 0x76], [255, 255, 255]) - 4.54).abs() < 0.01);
        assert!((contrast([0x2f, 0x5b, 0xd3], [255, 255, 255]) - 5.90).abs() < 0.01);
    }

    #[test]
    fn colours_are_read_as_rrggbb_only() {
        assert_eq!(parse_hex_colour("#1a5FB4"), Some([0x1a, 0x5f, 0xb4]));
        for bad in [
            "1a5fb4",
            "#1a5fb",
            "#1a5fb4a",
            "#gg0000",
            "#fff",
            "",
            "#１２３４５６",
        ] {
            assert_eq!(parse_hex_colour(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_malformed_accent_is_refused_naming_the_key() {
        let p = problems("[portal]\naccent = \"blue\"\n");
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].0, "portal.accent");
        assert!(p[0].1.contains("#RRGGBB"), "{p:?}");
    }

    #[test]
    fn an_accent_too_light_for_white_text_is_refused_with_its_ratio() {
        let p = problems("[portal]\naccent = \"#7ea2ff\"\n");
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].0, "portal.accent");
        assert!(p[0].1.contains("contrast ratio of 2.47:1"), "{p:?}");
        // Just over the line is accepted, just under is not.
        assert_eq!(problems("[portal]\naccent = \"#767676\"\n"), Vec::new());
        assert_eq!(problems("[portal]\naccent = \"#777777\"\n").len(), 1);
    }

    #[test]
    fn a_brand_must_be_a_short_line_of_text() {
        assert_eq!(problems("[portal]\nbrand = \"Acme Cloud\"\n"), Vec::new());
        for bad in ["", " Acme", "Acme\\n", &"x".repeat(61)] {
            let p = problems(&format!("[portal]\nbrand = \"{bad}\"\n"));
            assert_eq!(p.len(), 1, "{bad:?}: {p:?}");
            assert_eq!(p[0].0, "portal.brand");
        }
    }

    #[test]
    fn logos_are_judged_by_their_bytes() {
        assert_eq!(
            logo_kind(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"),
            Some(LogoKind::Png)
        );
        assert_eq!(
            logo_kind(b"<svg xmlns=\"http://www.w3.org/2000/svg\"/>"),
            Some(LogoKind::Svg)
        );
        assert_eq!(
            logo_kind(
                "\u{feff}<?xml version=\"1.0\"?>\n<!-- made by hand -->\n<!DOCTYPE svg>\n<svg>"
                    .as_bytes()
            ),
            Some(LogoKind::Svg)
        );
        for bad in [
            &b"GIF89a"[..],
            b"<html><svg></svg></html>",
            b"<svgx>",
            b"\xff\xd8\xff\xe0 JFIF",
            b"",
        ] {
            assert_eq!(logo_kind(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn a_logo_file_missing_too_large_or_not_an_image_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let at = |name: &str, bytes: &[u8]| {
            let p = dir.path().join(name);
            std::fs::write(&p, bytes).unwrap();
            p
        };
        let svg = at(
            "ok.svg",
            b"<svg xmlns=\"http://www.w3.org/2000/svg\"></svg>",
        );
        let big = at(
            "big.png",
            &[b"\x89PNG\r\n\x1a\n".as_slice(), &[0; 65537]].concat(),
        );
        let jpeg = at("photo.png", b"\xff\xd8\xff\xe0 JFIF");
        let missing = dir.path().join("missing.svg");
        let config = |p: &Path| format!("[portal]\nlogo_file = {:?}\n", p.display().to_string());
        assert_eq!(problems(&config(&svg)), Vec::new());
        for (path, says) in [
            (&big, "a logo may be at most 65536 bytes"),
            (&jpeg, "is neither a PNG"),
            (&missing, "cannot read"),
        ] {
            let p = problems(&config(path));
            assert_eq!(p.len(), 1, "{p:?}");
            assert_eq!(p[0].0, "portal.logo_file");
            assert!(p[0].1.contains(says), "{p:?}");
        }
    }
}
