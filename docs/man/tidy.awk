# scdoc's output, tidied: it emits a paragraph macro (.P) where it does
# nothing -- before and right after a section header, twice in a row, and
# just before the end of an indented block (.RE) -- and mandoc -Tlint warns
# about each ("skipping paragraph macro").  This drops those, and moves a
# .P that ends an indented block to after its .RE, where it still separates
# the paragraphs.  man(1) renders the page the same; tests/man_pages.sh
# fails on any mandoc warning.
/^\.P$/ {
    if (!after_header)
        pending = 1
    next
}
/^\.(SH|SS|TH)( |$)/ { pending = 0; after_header = 1; print; next }
/^\.RE$/ { print; next }     # a pending .P moves past it
{
    if (pending)
        print ".P"
    pending = 0
    after_header = 0
    print
}
