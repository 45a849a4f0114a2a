"""Data Docs that render without network: the scripts, styles and fonts Great Expectations'
page templates load from CDNs are shipped with this package (``validations/static/vendor``,
minified files taken from the npm packages named in ``LICENSES.md`` beside them) and each page
is pointed at copies placed in the site's own ``static/vendor`` folder.

Without them the index page's validation list, drawn by bootstrap-table, stays empty on a
machine without internet, which is where Kafka dumps usually are.
"""

from __future__ import annotations

import os
import re
import shutil
from importlib import resources

VENDOR = "static/vendor"

# the CDN addresses of GE 1.x templates -> the shipped file (relative to static/vendor)
ASSETS: dict[str, str] = {
    "https://code.jquery.com/jquery-3.7.1.min.js": "jquery/jquery.min.js",
    "https://cdnjs.cloudflare.com/ajax/libs/popper.js/1.12.9/umd/popper.min.js":
        "popper.js/popper.min.js",
    "https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js":
        "bootstrap/bootstrap.min.js",
    "https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css":
        "bootstrap/bootstrap.min.css",
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.js":
        "bootstrap-table/bootstrap-table.min.js",
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.css":
        "bootstrap-table/bootstrap-table.min.css",
    "https://unpkg.com/bootstrap-table@1.19.1/dist/extensions/filter-control/bootstrap-table-filter-control.min.js":
        "bootstrap-table/bootstrap-table-filter-control.min.js",
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.min.css":
        "bootstrap-table/bootstrap-table-filter-control.min.css",
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.css":
        "bootstrap-table/bootstrap-table-filter-control.min.css",
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/js/bootstrap-datepicker.min.js":
        "bootstrap-datepicker/bootstrap-datepicker.min.js",
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/css/bootstrap-datepicker.min.css":
        "bootstrap-datepicker/bootstrap-datepicker.min.css",
    "https://cdnjs.cloudflare.com/ajax/libs/font-awesome/6.6.0/css/all.min.css":
        "fontawesome/css/all.min.css",
    "https://cdn.jsdelivr.net/npm/@forevolve/bootstrap-dark@1.1.0/dist/css/bootstrap-prefers-dark.css":
        "bootstrap-dark/bootstrap-prefers-dark.min.css",
    "https://cdn.jsdelivr.net/npm/vega@5": "vega/vega.min.js",
    "https://cdn.jsdelivr.net/npm/vega-lite@5": "vega/vega-lite.min.js",
    "https://cdn.jsdelivr.net/npm/vega-embed@6": "vega/vega-embed.min.js",
}  # fmt: skip
GE_IMAGE = re.compile(r"https://great-expectations-web-assets\.s3[^\"']*\.png(\?[^\"']*)?")
SITE_STATIC = re.compile(r"""(?P<attr>src|href)=(?P<q>["'])(?:\./|(?:\.\./)+)static/""")
# a resource a page would still load from the network (links to follow are not loads)
REMOTE_LOAD = re.compile(r"""(?:src|href)=["'](https?://[^"']+)["'][^>]*""")


def vendor_root():
    return resources.files("validations").joinpath("static", "vendor")


def localise(site: str, html: str, folder: str) -> str:
    """A page of the site at ``folder`` with every CDN asset pointed at the site's copy."""
    base = os.path.relpath(os.path.join(site, VENDOR), folder).replace(os.sep, "/")
    for url, rel in ASSETS.items():
        html = html.replace(url, f"{base}/{rel}")
    logo = os.path.relpath(os.path.join(site, "static", "images", "logo-long.png"), folder)
    html = GE_IMAGE.sub(logo.replace(os.sep, "/"), html)
    # GE counts one level too few on validation result pages (their favicon is not found):
    # every reference to the site's static folder is made relative to the page again
    static = os.path.relpath(os.path.join(site, "static"), folder).replace(os.sep, "/")
    return SITE_STATIC.sub(lambda m: f"{m['attr']}={m['q']}{static}/", html)


def install(site: str) -> None:
    """Copy the shipped assets into the site (``static/vendor``)."""
    target = os.path.join(site, VENDOR)
    with resources.as_file(vendor_root()) as src:
        shutil.copytree(src, target, dirs_exist_ok=True)


def remote_loads(html: str) -> list[str]:
    """Scripts, styles and images a page would still fetch from the network."""
    out = []
    for m in re.finditer(r"<(script|link|img)\b[^>]*>", html):
        tag = m.group(0)
        if m.group(1) == "link" and "stylesheet" not in tag and "icon" not in tag:
            continue
        found = REMOTE_LOAD.search(tag)
        if found:
            out.append(found.group(1))
    return out
