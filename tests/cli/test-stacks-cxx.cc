// A C++ program for tests/cli/test-stacks.sh: one function with a C++ name
// allocates most, so that a report can be checked for its demangled name.
//   test-stacks-cxx MIB   stacks_test::Hog::grow(int) allocates MIB MiB
#include <cstdlib>
#include <vector>

namespace stacks_test
{
struct Hog {
	std::vector<char *> kept;
	__attribute__((noinline)) void grow(int mib);
};

void Hog::grow(int mib)
{
	for (int i = 0; i < mib; i++) {
		char *p = new char[1 << 20];
		for (int j = 0; j < 1 << 20; j += 4096)
			p[j] = 1;
		kept.push_back(p);
	}
}
} // namespace stacks_test

int main(int argc, char **argv)
{
	stacks_test::Hog h;
	h.grow(argc > 1 ? std::atoi(argv[1]) : 16);
	for (char *p : h.kept)
		delete[] p;
	return 0;
}
