#!/usr/bin/env bash
# Run THERE (one H200): start the builds of compare_trees.sh's trees in the background, all
# at once, and return. Arguments: TREE:TARGET,TARGET,... (build-trees/TREE, the targets
# besides quiver). The first tree builds at normal priority, so its checks can start while
# the others build; each build leaves /tmp/built_TREE.done or /tmp/built_TREE.failed, and
# its log in /tmp/prebuild_TREE.log. compare_trees.sh then finds the builds up to date.
cd "$(dirname "$0")/../.."
checkout=$PWD  # not "root": setup_deps.sh sets that
source tools/gpu/setup_deps.sh
n=0
for spec in "$@"; do
  tree=${spec%%:*}; tg=${spec#*:}; tg=${tg//,/ }
  nice_lvl=$([ $n = 0 ] && echo 0 || echo 10); n=$((n+1))
  rm -f /tmp/built_$tree.*  # a machine that stayed up keeps the last run's markers
  [ -e build-trees/$tree/.deps ] || ln -s "$checkout/.deps" build-trees/$tree/.deps
  nice -n $nice_lvl bash tools/gpu/build_tree.sh build-trees/$tree /tmp/prebuild_$tree.log $tg &&
    touch /tmp/built_$tree.done || touch /tmp/built_$tree.failed &
done
