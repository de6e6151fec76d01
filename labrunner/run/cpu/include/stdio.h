// <stdio.h> for a kernel file on the CPU backend: see <cstdio> next to it.
#pragma once
