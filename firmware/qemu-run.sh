#!/usr/bin/env bash
# Cargo runner (see .cargo/config.toml): `cargo run --release` in firmware/
# (other boards: `--no-default-features --features BOARD,flash --target TARGET`).
#
#   UART0, agent link        -> tcp 127.0.0.1:${BUDGETGATE_AGENT_PORT:-4440}
#   UART1, operator console  -> tcp 127.0.0.1:${BUDGETGATE_CONSOLE_PORT:-4441}
#       QEMU listens on both and waits until both are connected (so that the
#       console banner is not lost): `nc 127.0.0.1 4440`, `nc 127.0.0.1 4441`.
#   defmt log (semihosting)  -> QEMU's stdout: decoded by `defmt-print` if it
#       is installed, else saved raw to target/defmt.bin.
#   QEMU's -machine and -cpu -> the board's line in boards.txt: the board
#       named by $BUDGETGATE_BOARD, else the board of the target in the ELF's
#       path (target/<triple>/...; one board per target in boards.txt).
#   flash (issue 15)         -> the host file ${BUDGETGATE_FLASH:-target/flash.bin}
#       (semihosting file I/O; created and erased if missing): the run and the
#       audit log survive a kill of QEMU. BUDGETGATE_FLASH=none: no flash.
# Exit status: QEMU's (101 = firmware panic, 102 = fault).
set -euo pipefail
elf="$1"
shift
here="$(dirname "$0")"
board="${BUDGETGATE_BOARD:-}"
machine="" cpu=""
while read -r name _class target qmachine qcpu _mhz; do
  case "$name" in ''|'#'*) continue ;; esac
  if { [ -n "$board" ] && [ "$name" = "$board" ]; } \
     || { [ -z "$board" ] && [[ "$elf" == *"/$target/"* ]]; }; then
    board="$name" machine="$qmachine" cpu="$qcpu"
    break
  fi
done < "$here/boards.txt"
if [ -z "$machine" ]; then
  echo "qemu-run.sh: no board in boards.txt for ${board:-$elf} (set BUDGETGATE_BOARD)" >&2
  exit 2
fi
agent_port="${BUDGETGATE_AGENT_PORT:-4440}"
console_port="${BUDGETGATE_CONSOLE_PORT:-4441}"
echo "qemu: board $board; waiting for: nc 127.0.0.1 $agent_port (agent), then nc 127.0.0.1 $console_port (console)" >&2

qemu=(qemu-system-arm
  -cpu "$cpu" -machine "$machine" -nographic -monitor none
  -semihosting-config enable=on,target=native
  -serial "tcp:127.0.0.1:$agent_port,server=on,wait=on,nodelay=on"
  -serial "tcp:127.0.0.1:$console_port,server=on,wait=on,nodelay=on"
  -kernel "$elf" "$@")

# issue 15: the flash file, named on the semihosting command line.
flash="${BUDGETGATE_FLASH:-target/flash.bin}"
if [ "$flash" != none ]; then
  qemu+=(-append "flash=$flash")
fi

if command -v defmt-print >/dev/null 2>&1; then
  "${qemu[@]}" | defmt-print -e "$elf"
else
  mkdir -p target
  echo "qemu: defmt-print not found; raw defmt log in target/defmt.bin" >&2
  "${qemu[@]}" > target/defmt.bin
fi
