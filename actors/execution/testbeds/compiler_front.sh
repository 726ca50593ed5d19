#!/bin/bash
# The compiler front of testbed installs (compiler_cache.py). It runs under every name of ccache's
# links (gcc, cc, g++, c++, x86_64-linux-gnu-gcc, ...), first on the install's PATH, and hands the
# compile to the next of that name on the PATH (ccache's link) with one change: a build isolation's
# folder (pip's TMP/pip-build-env-<random>, uv's CACHE/builds-v0/.tmp<random>), whose name is random
# at every install, is named through a link whose name is the same at every install that resolves
# the same build requirements: build-env.KEY beside it, KEY from the distributions it holds that
# ship C headers (numpy, say). The arguments, the preprocessor's line markers and ccache's manifests
# then name the same headers at every testbed, and at a test run's install, whose isolation holds
# other versions of setuptools or wheel, so ccache hits. Two isolations with the same distributions
# of headers hold the same headers, so a link to either gives the right ones, even to builds that
# run at once.
shopt -s nullglob
front=${0%/*}

# ccache makes paths relative to the directory it works in, by the name PWD gives it when that
# names the same folder. The testbed's tree is that folder's name for every compile, whether an
# install works in /testbed (a second name of the tree) or a test run's install in a copy of it
# mounted at both names: entries then name the same paths at every testbed and every test run.
if [[ -n ${MAGIS_TESTBED_TREE-} && ( $PWD == /testbed || $PWD == /testbed/* ) ]]; then
    apparent=$MAGIS_TESTBED_TREE${PWD#/testbed}
    [[ $apparent -ef . ]] && export PWD=$apparent
fi
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
        held=()
        for record in "$isolated"/lib/python*/site-packages/*.dist-info/RECORD "$isolated"/*/lib/python*/site-packages/*.dist-info/RECORD; do
            if grep -qE '\.(h|hh|hpp|hxx|inc)(,|$)' "$record"; then
                held+=("${record%/RECORD}")
            fi
        done
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
