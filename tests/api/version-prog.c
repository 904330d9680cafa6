/* The version a program compiled against the header sees (first line) and
 * the one the library it runs with says (second): tests/api/test-version.sh
 * holds both to configure.ac's. */
#include <memlimits.h>
#include <stdio.h>

int main(void)
{
	printf("%s\n%s\n", ML_VERSION_STRING, ml_version());
	return 0;
}
