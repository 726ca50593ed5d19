#!/bin/bash
# The compiler front of testbed installs (compiler_cache.py). It runs under every name of ccache's
# links (gcc, cc, g++, c++, x86_64-linux-gnu-gcc, ...), first on the install's PATH, and hands the
# compile to the next of that name on the PATH (ccache's link) with one change: a build isolation's
# folder (pip's TMP/pip-build-env-<random>, uv's CACHE/builds-v0/.tmp<random>), whose name is random
# at every install, is named through a link whose name is the same at every install that resolves
# the same build requirements: build-env.KEY beside it, KEY from the distributions it holds. The
# arguments, the preprocessor's line markers and ccache's manifests then name the same headers at
# every testbed, so ccache hits. Two isolations with the same distributions hold the same headers,
# so a link to either gives the right ones, even to builds that run at once.
shopt -s nullglob
front=${0%/*}
name=${0##*/}
PATH=":$PATH:"
PATH=${PATH//":$front:"/:}
PATH=${PATH#:}
PATH=${PATH%:}

isolation='(/([^/,=:]+/)*(pip-build-env-[[:alnum:]_]+|builds-v0/\.tmp[[:alnum:]]+))(/|$)'
for argument in "$@"; do
    if [[ $argument =~ $isolation ]]; then
        isolated=${BASH_REMATCH[1]}
        break
    fi
done

if [[ -n ${isolated-} && -d $isolated ]]; then
    for link in "${isolated%/*}"/build-env.*; do
        # Made by an earlier compile of this isolation (no KEY to compute: shell builtins only).
        [[ $link -ef $isolated ]] && stable=$link && break
    done
    if [[ -z ${stable-} ]]; then
        # pip's isolation: overlay/ and normal/ prefixes; uv's: a virtual environment.
        held=("$isolated"/lib/python*/site-packages/*.dist-info "$isolated"/*/lib/python*/site-packages/*.dist-info)
        key=$(printf '%s\n' "${held[@]#"$isolated"}" | cksum)
        stable=${isolated%/*}/build-env.${key%% *}
        if [[ ! -e $stable ]]; then
            # A link left by an earlier install step (its isolation gone) is replaced at once: made
            # under a hidden name, then renamed.
            draft=${isolated%/*}/.build-env.${key%% *}.$$
            ln -s "$isolated" "$draft" 2>/dev/null && mv -Tf "$draft" "$stable" 2>/dev/null || stable=
        fi
    fi
    if [[ -n $stable ]]; then
        rewritten=()
        for argument in "$@"; do
            rewritten+=("${argument//"$isolated"/"$stable"}")
        done
        set -- "${rewritten[@]}"
    fi
fi
exec "$name" "$@"
