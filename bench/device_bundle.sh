#!/usr/bin/env bash
# bench/device_bundle.sh - packs what bench/device.sh needs on a bare GPU machine (the device tool's
# machine: no package registry, no compiler for muse's dependencies) into .dev/bundle.tar.xz, a
# folder git ignores (.git/info/exclude), so that a device run carries it (`carry: [".dev"]`):
#   bin/   muse and the two Vulkan test programs (stripped), vulkaninfo when this box has it
#   lib/   every shared library they load but glibc's own (Debian 12's builds: they run on a newer
#          glibc), so LD_LIBRARY_PATH=<bundle>/lib finds them
#   debs/  the Vulkan loader and the GL dispatch libraries NVIDIA's Vulkan driver needs (apt-get
#          download; the device machine unpacks them with dpkg -x, docs/vulkan.md "On a real GPU")
#   extra/ any other programs named in $EXTRA_BINS (a reference built elsewhere to measure against,
#          with their libraries in lib/): this script builds nothing
# Usage: make && bash bench/device_bundle.sh        (then: device run, carry .dev, bench/device.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
D=.dev
rm -rf "$D"
mkdir -p "$D/pack/bin" "$D/pack/lib" "$D/pack/debs" "$D/pack/extra"
grep -qx '/.dev/' .git/info/exclude 2>/dev/null || echo '/.dev/' >> .git/info/exclude
bins=(build/muse build/tests/vulkan/test_vulkan_ops build/tests/vulkan/test_vulkan_models)
for b in "${bins[@]}"; do
    [ -x "$b" ] || { echo "device_bundle: $b is missing (make first)" >&2; exit 1; }
    strip -o "$D/pack/bin/$(basename "$b")" "$b"
done
if command -v vulkaninfo >/dev/null; then cp "$(command -v vulkaninfo)" "$D/pack/bin/"; bins+=("$(command -v vulkaninfo)"); fi
for b in ${EXTRA_BINS:-}; do
    cp -L "$b" "$D/pack/extra/"
    bins+=("$b")
done
# the libraries (glibc's own stay: the machine's newer glibc runs these)
for b in "${bins[@]}"; do ldd "$b"; done | awk '/=> \// {print $3}' | sort -u |
    grep -Ev '/(libc|libm|libpthread|libdl|librt|ld-linux-x86-64|libresolv)\.so' |
    while read -r l; do cp -L "$l" "$D/pack/lib/"; done
(cd "$D/pack/debs" && apt-get download libvulkan1 libglvnd0 libegl1 libgl1 libglx0 libopengl0 libgles2 >/dev/null)
tar -C "$D/pack" -cJf "$D/bundle.tar.xz" .
rm -rf "$D/pack"
echo "device_bundle: $D/bundle.tar.xz ($(du -h "$D/bundle.tar.xz" | cut -f1))"
