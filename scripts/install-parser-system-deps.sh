#!/usr/bin/env bash
# Installs the Debian packages the docreader engines use (idempotent: skips what is already there).
# The lists: functions/docreader/system-packages.txt (what the docreader image installs too) and
# scripts/local-system-packages.txt (tesseract and poppler, local and CI only: Textract does OCR on AWS;
# chromium and chromium-driver for the console's browser test).
# Measured on Debian 12: 86 packages, ~57 MB download, ~12 s to install after `apt-get update`.
# The OCR language data for Japanese, Chinese (simplified, traditional) and OSD (issue 13) add 4 packages,
# ~7.6 MB download (~18 MB installed).
# Usage: sudo scripts/install-parser-system-deps.sh [--no-libreoffice] [--list]
#   --list   print the packages this would install (one a line) and exit
set -euo pipefail

here="$(dirname "$0")"
list_files=("$here/../functions/docreader/system-packages.txt" "$here/local-system-packages.txt")
no_libreoffice=false
list_only=false
for arg in "$@"; do
  case "$arg" in
    --no-libreoffice) no_libreoffice=true ;;
    --list) list_only=true ;;
    *) echo "unknown option: $arg" >&2; exit 2 ;;
  esac
done

packages=()
while read -r line; do
  p="${line%%#*}"
  p="${p//[[:space:]]/}"
  [[ -z "$p" ]] && continue
  if $no_libreoffice && [[ "$p" == libreoffice-* ]]; then continue; fi
  packages+=("$p")
done < <(cat "${list_files[@]}")

if $list_only; then
  printf '%s\n' "${packages[@]}"
  exit 0
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "parser system deps already installed"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "installed: ${missing[*]}"
