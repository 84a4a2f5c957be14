#!/usr/bin/env bash
# devdeps-add-jpeg.sh BUNDLE - adds Debian 12's libjpeg-turbo (TurboJPEG and libjpeg APIs, headers, pkg-config
# files) to a relocatable dependency bundle for the GPU machine (the folder dev/device_suite.sh sources as
# .devdeps/env.sh), so that the imagefolder and webdataset sources build there: that machine has neither
# library nor a package registry. The .pc files are made relative to their own folder, like the bundle's.
#
#   bash dev/devdeps-add-jpeg.sh .devdeps
set -euo pipefail
bundle=${1:?usage: devdeps-add-jpeg.sh BUNDLE}
root="$bundle/root"
[ -d "$root/usr/lib/x86_64-linux-gnu" ] || { echo "devdeps-add-jpeg.sh: $bundle has no root/usr/lib/x86_64-linux-gnu" >&2; exit 2; }
work=$(mktemp -d /tmp/devdeps-jpeg.XXXXXX)
trap 'rm -rf "$work"' EXIT
pkgs=(libturbojpeg0 libturbojpeg0-dev libjpeg62-turbo libjpeg62-turbo-dev)
(cd "$work" && { apt-get -q download "${pkgs[@]}" >/dev/null 2>&1 ||
                 { apt-get -q update >/dev/null && apt-get -q download "${pkgs[@]}" >/dev/null; }; })
for f in "$work"/*.deb; do
    dpkg -x "$f" "$root"
    basename "${f%.deb}" >> "$bundle/MANIFEST"
done
lib="$root/usr/lib/x86_64-linux-gnu"
for pc in "$lib"/pkgconfig/libturbojpeg.pc "$lib"/pkgconfig/libjpeg.pc; do
    [ -L "$pc" ] && cp --remove-destination "$(readlink -f "$pc")" "$pc"
    sed -i 's|^prefix=/usr$|prefix=${pcfiledir}/../../..|; s|^libdir=/usr/lib/x86_64-linux-gnu$|libdir=${prefix}/lib/x86_64-linux-gnu|; s|^includedir=/usr/include$|includedir=${prefix}/include|' "$pc"
done
# jpeglib.h includes "jconfig.h", which Debian keeps in the multiarch folder that env.sh does not put on CPATH:
# without a copy beside jpeglib.h the compiler finds the GPU machine's own jconfig.h (Ubuntu's libjpeg 8), and
# every decode then fails with "Wrong JPEG library version: library is 62, caller expects 80".
cp "$root/usr/include/x86_64-linux-gnu/jconfig.h" "$root/usr/include/jconfig.h"
rm -rf "$root/usr/share/doc" "$root/usr/share/man"
echo "devdeps-add-jpeg.sh: added ${pkgs[*]} to $bundle"
