// attnlab's check of a kernel's parameter types, compiled after the student's file by the
// compile gate (never at grading). PTX says only "a 64-bit pointer", so a kernel that takes
// `double*` where the lab passes float data would compile, run and read garbage. Here each
// parameter's C++ type is matched against what the lab passes; a mismatch instantiates an
// incomplete type, and the compiler's message names the type the student wrote.
#pragma once

namespace attnlab_signature {

template <class T, class U> struct same { static constexpr bool value = false; };
template <class T> struct same<T, T> { static constexpr bool value = true; };

template <int I, class Head, class... Tail> struct nth { using type = typename nth<I - 1, Tail...>::type; };
template <class Head, class... Tail> struct nth<0, Head, Tail...> { using type = Head; };

// The type of parameter I of a kernel, from decltype(kernel).
template <int I, class F> struct parameter;
template <int I, class... A> struct parameter<I, void(A...)> { using type = typename nth<I, A...>::type; };

// Float data the lab passes: read-only inputs may drop the const; float2/float4 views of the same
// memory are accepted, since the buffers are aligned for them.
template <class T> struct float_data {
    static constexpr bool value = same<T, float>::value || same<T, float2>::value || same<T, float4>::value;
};
template <class T> struct input_pointer { static constexpr bool value = false; };
template <class T> struct input_pointer<T*> { static constexpr bool value = float_data<T>::value; };
template <class T> struct input_pointer<const T*> { static constexpr bool value = float_data<T>::value; };
template <class T> struct output_pointer { static constexpr bool value = false; };
template <class T> struct output_pointer<T*> { static constexpr bool value = float_data<T>::value; };
// Int32 data the lab passes (lab 3's block table and lengths): read-only, the const may be dropped.
template <class T> struct int_input_pointer { static constexpr bool value = false; };
template <class T> struct int_input_pointer<T*> { static constexpr bool value = same<T, int>::value; };
template <class T> struct int_input_pointer<const T*> { static constexpr bool value = same<T, int>::value; };
template <class T> struct integer {
    static constexpr bool value = same<T, int>::value || same<T, unsigned int>::value;
};

template <class T> struct parameter_type_is;  // never defined: naming it shows T in the error
template <bool ok, class T> struct expect { static constexpr int value = 0; };
template <class T> struct expect<false, T> { static constexpr int value = sizeof(parameter_type_is<T>); };

}  // namespace attnlab_signature
