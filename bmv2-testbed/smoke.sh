# bmv2-testbed/smoke.sh PLAN: the smoke checks (bmv2-testbed/smoke), run on
# the controller host, which reaches the switch's P4Runtime and Thrift, the
# controller and the agent's metrics over the management network.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
mx ctl "$work/smoke" --plan "$plan" --p4info "$NETDIR_ROOT/p4/build/netdir.p4info.txtpb"
