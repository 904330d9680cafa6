#!/usr/bin/env python3
"""Every <text> of each SVG lies inside its viewBox (issue 36).

    svg-check.py FILE.svg...

A text's box is estimated as tools/svg.h measures text: a mean advance of
0.6 of the font size a character (0.66 bold), the anchor deciding where
the box starts, an ascent of 0.8 and a descent of 0.25 of the size around
the baseline.  One line per text outside, naming the file, the text and
its box; exit status 1 if any, 2 when a file cannot be read or parsed.
"""
import sys
import xml.etree.ElementTree as ET

EM, EM_BOLD = 0.6, 0.66
SVG = "{http://www.w3.org/2000/svg}"


def check(path):
    root = ET.parse(path).getroot()
    if root.tag != SVG + "svg":
        raise ValueError("the root is not <svg>")
    vx, vy, vw, vh = (float(v) for v in root.get("viewBox").split())
    bad = 0
    for t in root.iter(SVG + "text"):
        s = "".join(t.itertext())
        size = float(t.get("font-size", "16"))
        em = EM_BOLD if t.get("font-weight") == "bold" else EM
        w = len(s) * size * em
        x, y = float(t.get("x", "0")), float(t.get("y", "0"))
        anchor = t.get("text-anchor", "start")
        left = x if anchor == "start" else x - w if anchor == "end" else x - w / 2
        box = (left, y - 0.8 * size, left + w, y + 0.25 * size)
        if box[0] < vx or box[1] < vy or box[2] > vx + vw or box[3] > vy + vh:
            print("%s: text %r at x=%g y=%g (box %.1f,%.1f to %.1f,%.1f) "
                  "is outside the viewBox %g %g %g %g"
                  % ((path, s, x, y) + box + (vx, vy, vw, vh)))
            bad += 1
    return bad


def main():
    if len(sys.argv) < 2:
        print("usage: svg-check.py FILE.svg...", file=sys.stderr)
        return 2
    bad = 0
    for path in sys.argv[1:]:
        try:
            bad += check(path)
        except (OSError, ET.ParseError, ValueError, TypeError,
                AttributeError) as e:
            print("%s: %s" % (path, e), file=sys.stderr)
            return 2
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
