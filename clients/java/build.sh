#!/bin/sh
# Builds the Java client offline: javac against Debian's jars in /usr/share/java, the same
# artifacts pom.xml names for Maven users (Debian 12: default-jdk-headless,
# libjackson2-databind-java, libjakarta-servlet-api-java; for the tests junit5,
# libtomcat10-embed-java and libjakarta-annotation-api-java; scripts/deps.sh --test installs them all).
#
#   clients/java/build.sh jar OUT    OUT/leasegate-client.jar (the library) and
#                                    OUT/leasegate-conformance.jar (the contract driver)
#   clients/java/build.sh test OUT   the same, then the tests, run with JUnit's console launcher
#                                    against the server $LEASEGATE_BIN names
#
# CMake runs the first for its target java_client and the second as the ctest entry client_java.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
what=${1:?usage: build.sh jar|test OUT}
out=${2:?usage: build.sh jar|test OUT}
J=${LEASEGATE_JAVA_JARS:-/usr/share/java}

need() {
  for f in "$@"; do
    if [ ! -r "$J/$f" ]; then
      echo "build.sh: $J/$f is missing: install the Java packages (scripts/deps.sh --test)" >&2
      exit 1
    fi
  done
}
command -v javac >/dev/null 2>&1 || { echo "build.sh: javac is missing: install default-jdk-headless (scripts/deps.sh --test)" >&2; exit 1; }
need jackson-databind.jar jackson-core.jar jackson-annotations.jar jakarta-servlet-api.jar
lib="$J/jackson-databind.jar:$J/jackson-core.jar:$J/jackson-annotations.jar"

mkdir -p "$out"
out=$(cd "$out" && pwd)
work="$out/classes"
rm -rf "$work" && mkdir -p "$work/main" "$work/conformance"

# The library: -Werror with every lint, as the C code builds with -Werror.
find "$here/src/main/java" -name '*.java' > "$work/main.list"
javac --release 17 -Xlint:all -Werror -encoding UTF-8 -d "$work/main" \
  -cp "$lib:$J/jakarta-servlet-api.jar" @"$work/main.list"
cat > "$work/main.mf" <<MF
Automatic-Module-Name: io.leasegate.client
Implementation-Title: leasegate-client
Implementation-Version: 0.1.0
Class-Path: $J/jackson-databind.jar $J/jackson-core.jar $J/jackson-annotations.jar
MF
jar --create --file "$out/leasegate-client.jar" --manifest "$work/main.mf" -C "$work/main" .

find "$here/src/conformance/java" -name '*.java' > "$work/conformance.list"
javac --release 17 -Xlint:all -Werror -encoding UTF-8 -d "$work/conformance" \
  -cp "$lib:$out/leasegate-client.jar" @"$work/conformance.list"
cat > "$work/conformance.mf" <<MF
Main-Class: io.leasegate.conformance.ContractDriver
Class-Path: leasegate-client.jar $J/jackson-databind.jar $J/jackson-core.jar $J/jackson-annotations.jar
MF
jar --create --file "$out/leasegate-conformance.jar" --manifest "$work/conformance.mf" -C "$work/conformance" .

[ "$what" = jar ] && exit 0
[ "$what" = test ] || { echo "build.sh: unknown step '$what' (jar or test)" >&2; exit 2; }

need junit-platform-console-standalone.jar junit-jupiter-api.jar tomcat10-embed-core.jar jakarta-annotation-api.jar
: "${LEASEGATE_BIN:?set LEASEGATE_BIN to the leasegate binary (e.g. build/leasegate)}"
mkdir -p "$work/test"
testcp="$out/leasegate-client.jar:$out/leasegate-conformance.jar:$lib:$J/jakarta-servlet-api.jar:$J/junit-jupiter-api.jar:$J/apiguardian-api.jar:$J/opentest4j.jar:$J/junit-platform-commons.jar:$J/tomcat10-embed-core.jar:$J/jakarta-annotation-api.jar"
find "$here/src/test/java" -name '*.java' > "$work/test.list"
javac --release 17 -Xlint:all -Xlint:-processing -Werror -encoding UTF-8 -d "$work/test" -cp "$testcp" @"$work/test.list"
exec java -jar "$J/junit-platform-console-standalone.jar" --disable-banner --disable-ansi-colors --details=tree --fail-if-no-tests \
  -cp "$work/test:$testcp" --scan-classpath "$work/test"
